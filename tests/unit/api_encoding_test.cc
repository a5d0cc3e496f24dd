#include "http/encoding.h"

#include <gtest/gtest.h>

#include <string>

namespace bulkhead::api {
namespace {

TEST(Base64, EncodesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foob"), "Zm9vYg==");
  EXPECT_EQ(Base64Encode("fooba"), "Zm9vYmE=");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
}

TEST(Base64, DecodesRfc4648VectorsWithAndWithoutPadding) {
  EXPECT_EQ(Base64Decode(""), "");
  EXPECT_EQ(Base64Decode("Zg=="), "f");
  EXPECT_EQ(Base64Decode("Zg"), "f");
  EXPECT_EQ(Base64Decode("Zm8="), "fo");
  EXPECT_EQ(Base64Decode("Zm8"), "fo");
  EXPECT_EQ(Base64Decode("Zm9vYmFy"), "foobar");
}

TEST(Base64, RoundTripsEveryByteValue) {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  for (size_t length = 0; length <= all.size(); length += 37) {
    const std::string bytes = all.substr(0, length);
    EXPECT_EQ(Base64Decode(Base64Encode(bytes)), bytes) << length;
  }
  EXPECT_EQ(Base64Encode(std::string("\xff\xfe\x00", 3)), "//4A");
}

TEST(Base64, RejectsMalformedInput) {
  EXPECT_FALSE(Base64Decode("Z"));          // one symbol cannot encode a byte
  EXPECT_FALSE(Base64Decode("Zg="));        // padding that does not complete the quantum
  EXPECT_FALSE(Base64Decode("Zg==="));      // too much padding
  EXPECT_FALSE(Base64Decode("Zm9v="));      // padding after a full quantum
  EXPECT_FALSE(Base64Decode("Zm 9v"));      // whitespace
  EXPECT_FALSE(Base64Decode("Zm9v\n"));     // newline
  EXPECT_FALSE(Base64Decode("-_8A"));       // URL-safe alphabet
  EXPECT_FALSE(Base64Decode("Zh=="));       // non-zero leftover bits ("Zg==" is canonical)
  EXPECT_FALSE(Base64Decode("Z=g="));       // padding in the middle
  EXPECT_FALSE(Base64Decode(std::string("Zm\0v", 4)));
}

TEST(Base64, DecodedSizeMatchesDecodeWithoutDecoding) {
  for (std::string text : {"", "Zg==", "Zg", "Zm8=", "Zm8", "Zm9v", "Zm9vYmFy", "Zm9vYg"}) {
    EXPECT_EQ(Base64DecodedSize(text), Base64Decode(text)->size()) << text;
  }
  EXPECT_EQ(Base64DecodedSize(std::string(4 * 1000, 'A')), 3000u);
}

TEST(Utf8, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii\n\t"));
  EXPECT_TRUE(IsValidUtf8("h\xC3\xA9llo"));                 // é
  EXPECT_TRUE(IsValidUtf8("\xE2\x82\xAC"));                 // €
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));             // 😀
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));             // U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF"));                 // U+D7FF, just below surrogates
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));         // NUL is valid UTF-8
}

TEST(Utf8, RejectsIllFormedSequences) {
  EXPECT_FALSE(IsValidUtf8("\x80"));                  // lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xC3"));                  // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));              // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));              // overlong
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));          // overlong 3-byte
  EXPECT_FALSE(IsValidUtf8("\xF0\x80\x80\xAF"));      // overlong 4-byte
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));          // surrogate U+D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));      // U+110000
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));      // never-used lead byte
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("\xE2\x82"));              // truncated €
  EXPECT_FALSE(IsValidUtf8("ok\xE2\x28\xA1"));        // bad continuation
}

TEST(Utf8, SanitizeReplacesMaximalSubpartsWithReplacementCharacter) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(SanitizeUtf8("fine \xC3\xA9"), "fine \xC3\xA9");
  EXPECT_EQ(SanitizeUtf8("a\xFF" "b"), "a" + fffd + "b");
  // A truncated 3-byte sequence is one maximal subpart: one replacement.
  EXPECT_EQ(SanitizeUtf8("a\xE2\x82" "b"), "a" + fffd + "b");
  // Overlong: C0 is never valid, AF is a lone continuation: two replacements.
  EXPECT_EQ(SanitizeUtf8("\xC0\xAF"), fffd + fffd);
  // Surrogate: ED is valid, A0 is not allowed after it: ED, A0, 80 each replaced.
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(SanitizeUtf8("x\xF0\x9F\x98"), "x" + fffd);
  EXPECT_TRUE(IsValidUtf8(SanitizeUtf8("\x80\x81\xFE\xFF\xC3(")));
}

TEST(Utf8, IncompleteSuffixFindsOnlyUnfinishedCharacters) {
  EXPECT_EQ(IncompleteUtf8Suffix(""), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("abc"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xC3"), 1u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xE2\x82"), 2u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(IncompleteUtf8Suffix("\xF0\x9F\x98\x80"), 0u);  // complete
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xC3\xA9"), 0u);
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xFF"), 0u);            // invalid, not unfinished
  EXPECT_EQ(IncompleteUtf8Suffix("ab\xE0\x80"), 0u);        // can never become valid
  EXPECT_EQ(IncompleteUtf8Suffix("ab\x80\x80\x80"), 0u);    // stray continuations
}

TEST(Utf8, SplittingAnyWhereAndHoldingBackTheSuffixKeepsTextValid) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80z";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    std::string first = text.substr(0, cut);
    const size_t held = IncompleteUtf8Suffix(first);
    const std::string carried = first.substr(first.size() - held);
    first.resize(first.size() - held);
    EXPECT_TRUE(IsValidUtf8(first)) << cut;
    EXPECT_TRUE(IsValidUtf8(carried + text.substr(cut))) << cut;
  }
}

}  // namespace
}  // namespace bulkhead::api
