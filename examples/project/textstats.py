"""A tiny library with a bug for the examples' agent to fix: word counting."""


def words(text):
    """The words of `text`, lowercased, punctuation at either end stripped."""
    return [w.strip(".,;:!?").lower() for w in text.split(" ")]


def most_common(text, n=1):
    """The `n` most common words with their counts, most common first, ties alphabetical."""
    counts = {}
    for w in words(text):
        counts[w] = counts.get(w, 0) + 1
    return sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:n]
