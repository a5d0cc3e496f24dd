import unittest

from textstats import most_common, words


class WordsTest(unittest.TestCase):
    def test_punctuation_and_case(self):
        self.assertEqual(words("Hello, world!"), ["hello", "world"])

    def test_any_whitespace_separates_words(self):
        self.assertEqual(words("one  two\tthree\nfour "), ["one", "two", "three", "four"])


class MostCommonTest(unittest.TestCase):
    def test_counts_and_ties(self):
        self.assertEqual(most_common("b a b a c b", 2), [("b", 3), ("a", 2)])


if __name__ == "__main__":
    unittest.main()
