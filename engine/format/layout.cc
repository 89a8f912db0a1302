#include "engine/format/layout.h"

namespace waste::format {

std::string_view FmtName(Fmt f) {
  switch (f) {
    case Fmt::kF32:
      return "F32";
    case Fmt::kF16:
      return "F16";
    case Fmt::kQ8G:
      return "Q8G";
    case Fmt::kQ4G:
      return "Q4G";
    case Fmt::kVQ3R:
      return "VQ3R";
    case Fmt::kVQ2R:
      return "VQ2R";
    case Fmt::kSUB1:
      return "SUB1";
    case Fmt::kQ3G:
      return "Q3G";
    case Fmt::kVQ4P:
      return "VQ4P";
    case Fmt::kBF16R:
      return "BF16R";
    case Fmt::kMXFP4:
      return "MXFP4";
    case Fmt::kQ4GR:
      return "Q4GR";
    case Fmt::kINT4:
      return "INT4";
  }
  return "?";
}

bool IsTrunkFmt(int f) {
  return f == 0 || f == 1 || f == 2 || f == 3 || f == 7;
}
bool IsExpertFmt(int f) {
  return f == 4 || f == 5 || f == 8 || f == 9 || f == 10 || f == 11 || f == 12;
}

}  // namespace waste::format
