// CRC32C known answers and incremental extension.
#include "base/crc32c.h"

#include <string>

#include "gtest/gtest.h"

namespace fedlgc {
namespace {

TEST(Crc32c, KnownAnswers) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the standard check value
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::string zeros(32, '\0');
  EXPECT_EQ(Crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  std::string ones(32, '\xff');
  EXPECT_EQ(Crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, ExtendEqualsWhole) {
  std::string s;
  for (int i = 0; i < 1000; ++i) s.push_back(static_cast<char>(i * 7));
  for (size_t cut : {0, 1, 7, 8, 9, 500, 999, 1000}) {
    EXPECT_EQ(Crc32cExtend(Crc32c(s.data(), cut), s.data() + cut, s.size() - cut),
              Crc32c(s.data(), s.size()));
  }
}

}  // namespace
}  // namespace fedlgc
