// engine/gguf (the reader) and engine/kernels/gguf_dequant (the scalar
// reference) against the `gguf` package's own reader and dequantization,
// through tests/fixtures/gguf/ (tools/gguf/make_fixtures.py); and damaged
// and hand-built files, each refused with its own error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/gguf/gguf.h"
#include "engine/kernels/gguf_dequant.h"
#include "tests/test_util.h"

namespace waste {
namespace {

using gguf::Gguf;
using gguf::GgufFile;
using testing::FileBytes;
using testing::ScratchDir;

const std::string kDir = std::string(WASTE_FIXTURES) + "/gguf/";

uint32_t U32At(const std::vector<uint8_t>& b, size_t off) {
  uint32_t v;
  std::memcpy(&v, b.data() + off, 4);
  return v;
}

void WriteBytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

// Every type waste dequantizes, block by block, equal in every bit to the
// gguf package's dequantize of the same blocks; the type table equal to
// the package's GGML_QUANT_SIZES.
TEST(GgufDequant, EveryTypeEqualsThePackage) {
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(kDir + "quants")) {
    SCOPED_TRACE(e.path().filename().string());
    const std::vector<uint8_t> b = FileBytes(e.path().string());
    ASSERT_GE(b.size(), 16u);
    const uint32_t type = U32At(b, 0), block = U32At(b, 4), size = U32At(b, 8), n = U32At(b, 12);
    const gguf::TypeInfo* info = gguf::FindType(type);
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(info->block_size, block);
    EXPECT_EQ(info->type_size, size);
    ASSERT_EQ(b.size(), 16u + size_t{n} * size + size_t{n} * block * 4);
    ASSERT_TRUE(kernels::GgufDequantizes(type));
    std::vector<float> want(size_t{n} * block), got(want.size());
    std::memcpy(want.data(), b.data() + 16 + size_t{n} * size, want.size() * 4);
    ASSERT_TRUE(kernels::GgufDequantize(type, {b.data() + 16, size_t{n} * size}, got).ok());
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0)
          << "value " << i << " (block " << i / block << "): " << got[i] << " != " << want[i];
    }
    ++files;
  }
  // F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K IQ4_NL IQ4_XS MXFP4, IQ3_XXS IQ3_S
  // IQ2_XXS IQ2_XS IQ2_S IQ1_S IQ1_M
  EXPECT_EQ(files, 23);
}

TEST(GgufDequant, RefusesOtherTypesAndPartialBlocksByName) {
  std::vector<uint8_t> bytes(54);
  std::vector<float> out(256);
  Status s = kernels::GgufDequantize(34, bytes, out);
  EXPECT_NE(s.message().find("TQ1_0 is not dequantized"), std::string::npos) << s.message();
  s = kernels::GgufDequantize(99, bytes, out);
  EXPECT_NE(s.message().find("type 99"), std::string::npos) << s.message();
  std::vector<uint8_t> q8(35);  // one Q8_0 block and a byte
  std::vector<float> out32(32);
  s = kernels::GgufDequantize(gguf::kQ8_0, q8, out32);
  EXPECT_NE(s.message().find("Q8_0: 35 bytes"), std::string::npos) << s.message();
}

// tiny.gguf, written by the package's GGUFWriter: its metadata as written,
// its tensor infos and values as the package's GGUFReader reads them.
TEST(GgufReader, TinyFileAsThePackageReadsIt) {
  auto g = Gguf::Open(kDir + "tiny.gguf");
  ASSERT_TRUE(g.ok()) << g.status().message();
  std::ifstream jf(kDir + "tiny.json");
  const nlohmann::json want = nlohmann::json::parse(jf);
  ASSERT_EQ(g->files.size(), 1u);
  EXPECT_EQ(g->files[0].version, 3u);
  EXPECT_EQ(g->files[0].data_offset, want["data_offset"].get<uint64_t>());
  EXPECT_EQ(g->metadata().size(), want["kv_count"].get<size_t>());

  auto str = [&](const char* k) { return g->Find(k) ? g->Find(k)->text : "(none)"; };
  auto num = [&](const char* k) { return g->Find(k) ? g->Find(k)->Int() : std::nullopt; };
  EXPECT_EQ(str("general.architecture"), "qwen3moe");
  EXPECT_EQ(str("general.name"), "tiny-moe");
  EXPECT_EQ(str("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(num("qwen3moe.context_length"), 4096);
  EXPECT_EQ(num("qwen3moe.expert_count"), 8);
  EXPECT_EQ(num("test.u8"), 200);
  EXPECT_EQ(num("test.i8"), -100);
  EXPECT_EQ(num("test.u16"), 60000);
  EXPECT_EQ(num("test.i16"), -30000);
  EXPECT_EQ(num("test.i32"), -2000000000);
  EXPECT_EQ(num("test.bool"), 1);
  EXPECT_EQ(num("test.i64"), -(int64_t{1} << 62));
  EXPECT_EQ(num("test.u64"), std::nullopt);  // above int64: not an Int, still described
  EXPECT_EQ(g->Find("test.u64")->Describe(), "9223372036854775813");
  EXPECT_EQ(g->Find("test.f32")->Float(), 0.15625);
  EXPECT_EQ(g->Find("test.f64")->Float(), -1.0e100);
  const gguf::Value* strings = g->Find("test.strings");
  ASSERT_NE(strings, nullptr);
  EXPECT_EQ(strings->strings, (std::vector<std::string>{"a", "bc", "",
                                                        "d\xc3\xa9"
                                                        "f"}));
  const gguf::Value* ints = g->Find("test.ints");
  ASSERT_NE(ints, nullptr);
  EXPECT_EQ(ints->elem, gguf::ValueType::kI32);
  EXPECT_EQ(ints->Int(1), -2);
  EXPECT_EQ(ints->Int(3), std::nullopt);
  EXPECT_EQ(g->Find("tokenizer.ggml.tokens")->strings.size(), 4u);

  ASSERT_EQ(g->tensors.size(), want["tensors"].size());
  for (const auto& wt : want["tensors"]) {
    const std::string name = wt["name"];
    SCOPED_TRACE(name);
    const gguf::TensorInfo* t = g->FindTensor(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, wt["type"].get<uint32_t>());
    EXPECT_EQ(t->dims, wt["dims"].get<std::vector<uint64_t>>());
    EXPECT_EQ(t->offset, g->files[0].data_offset + wt["offset"].get<uint64_t>());
    EXPECT_EQ(t->bytes, wt["bytes"].get<uint64_t>());
    auto values = kernels::GgufDequantizeTensor(*g, *t);
    ASSERT_TRUE(values.ok()) << values.status().message();
    const auto wv = wt["values"].get<std::vector<double>>();
    ASSERT_EQ(values->size(), wv.size());
    for (size_t i = 0; i < wv.size(); ++i) ASSERT_EQ((*values)[i], static_cast<float>(wv[i])) << i;
  }
}

// A GGUF built by hand: u16/string key/values and F32 or raw tensors.
struct Builder {
  std::vector<uint8_t> b;
  uint64_t n_kv = 0, n_tensors = 0;
  std::vector<std::vector<uint8_t>> data;

  template <class T>
  void Put(std::vector<uint8_t>& out, T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out.insert(out.end(), p, p + sizeof v);
  }
  void PutString(std::vector<uint8_t>& out, const std::string& s) {
    Put<uint64_t>(out, s.size());
    out.insert(out.end(), s.begin(), s.end());
  }
  std::vector<uint8_t> kv, infos;
  void U16(const std::string& key, uint16_t v) {
    PutString(kv, key);
    Put<uint32_t>(kv, 2);
    Put(kv, v);
    ++n_kv;
  }
  void Str(const std::string& key, const std::string& v) {
    PutString(kv, key);
    Put<uint32_t>(kv, 8);
    PutString(kv, v);
    ++n_kv;
  }
  // A tensor of `dims` and `type` whose bytes are `bytes`, placed after the last.
  void Tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type,
              std::vector<uint8_t> bytes) {
    PutString(infos, name);
    Put<uint32_t>(infos, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) Put(infos, d);
    Put(infos, type);
    uint64_t off = 0;
    for (const auto& d : data) off += (d.size() + 31) / 32 * 32;
    Put(infos, off);
    data.push_back(std::move(bytes));
    ++n_tensors;
  }
  std::vector<uint8_t> Bytes() {
    std::vector<uint8_t> out;
    Put<uint32_t>(out, 0x46554747);
    Put<uint32_t>(out, 3);
    Put(out, n_tensors);
    Put(out, n_kv);
    out.insert(out.end(), kv.begin(), kv.end());
    out.insert(out.end(), infos.begin(), infos.end());
    for (const auto& d : data) {
      out.resize((out.size() + 31) / 32 * 32);
      out.insert(out.end(), d.begin(), d.end());
    }
    return out;
  }
};

std::vector<uint8_t> Floats(std::vector<float> v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

TEST(GgufReader, SplitFilesListedTogether) {
  const std::string dir = ScratchDir();
  for (uint16_t i = 0; i < 3; ++i) {
    Builder b;
    if (i == 0) b.Str("general.architecture", "deepseek2");
    b.U16("split.no", i);
    b.U16("split.count", 3);
    b.Tensor("t" + std::to_string(i), {2}, gguf::kF32, Floats({float(i), -float(i)}));
    WriteBytes(dir + "/m-0000" + std::to_string(i + 1) + "-of-00003.gguf", b.Bytes());
  }
  auto g = Gguf::Open(dir + "/m-00002-of-00003.gguf");  // any file of the split
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->files.size(), 3u);
  EXPECT_EQ(g->Find("general.architecture")->text, "deepseek2");
  ASSERT_EQ(g->tensors.size(), 3u);
  EXPECT_EQ(g->FindTensor("t2")->file, 2);
  auto v = kernels::GgufDequantizeTensor(*g, *g->FindTensor("t2"));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<float>{2, -2}));

  std::filesystem::remove(dir + "/m-00003-of-00003.gguf");
  auto missing = Gguf::Open(dir + "/m-00001-of-00003.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("m-00003-of-00003.gguf"), std::string::npos);
}

TEST(GgufReader, RefusesTypesItCannotDequantizeNamingTheTensor) {
  Builder b;
  b.Tensor("blk.0.ffn_down_exps.weight", {256}, 34, std::vector<uint8_t>(54));  // TQ1_0
  const std::string path = ScratchDir() + "/iq.gguf";
  WriteBytes(path, b.Bytes());
  auto g = Gguf::Open(path);
  ASSERT_TRUE(g.ok()) << g.status().message();  // read: the layout is known
  auto v = kernels::GgufDequantizeTensor(*g, g->tensors[0]);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "tensor 'blk.0.ffn_down_exps.weight': TQ1_0 is not dequantized yet");
}

// Where tensor `name`'s info in tiny.gguf holds field 0 (the dimensions),
// 1 (the type) or 2 (the offset).
size_t InfoField(const std::vector<uint8_t>& b, const std::string& name, size_t dims, int field) {
  const auto it = std::search(b.begin(), b.end(), name.begin(), name.end());
  const size_t end = static_cast<size_t>(it - b.begin()) + name.size() + 4 + 8 * dims;
  return field == 0 ? end - 8 * dims : field == 1 ? end : end + 4;  // dims, type, offset
}

struct Damage {
  const char* what;
  std::function<void(std::vector<uint8_t>&)> apply;
  const char* error;
};

TEST(GgufReader, DamagedCopiesGiveTheirOwnErrors) {
  const std::vector<uint8_t> good = FileBytes(kDir + "tiny.gguf");
  const std::string q4k = "blk.0.ffn_gate_exps.weight";
  auto set32 = [](std::vector<uint8_t>& b, size_t off, uint32_t v) { std::memcpy(&b[off], &v, 4); };
  auto set64 = [](std::vector<uint8_t>& b, size_t off, uint64_t v) { std::memcpy(&b[off], &v, 8); };
  const std::vector<Damage> damages = {
      {"empty", [](auto& b) { b.clear(); }, "the magic (4 bytes) runs past the end"},
      {"magic", [](auto& b) { b[0] = 'X'; }, "not a GGUF file"},
      {"v1", [&](auto& b) { set32(b, 4, 1); }, "GGUF v1 is not read"},
      {"big-endian", [&](auto& b) { set32(b, 4, 3u << 24); }, "big-endian GGUF is not read"},
      {"truncated header", [](auto& b) { b.resize(600); },
       "key 'test.strings': 4 elements do not fit in the file"},
      {"truncated infos", [](auto& b) { b.resize(1000); }, "runs past the end of the file"},
      {"truncated data", [](auto& b) { b.resize(b.size() - 10); },
       "tensor 'output_norm.weight' (128 bytes at data offset 2240) runs past the end"},
      {"tensor count", [&](auto& b) { set64(b, 8, uint64_t{1} << 40); },
       "1099511627776 tensors do not fit"},
      {"kv count", [&](auto& b) { set64(b, 16, uint64_t{1} << 40); },
       "1099511627776 key/values do not fit"},
      {"offset past the end", [&](auto& b) { set64(b, InfoField(b, q4k, 2, 2), 1 << 20); },
       "tensor 'blk.0.ffn_gate_exps.weight' (288 bytes at data offset 1048576) runs past the end"},
      {"misaligned", [&](auto& b) { set64(b, InfoField(b, q4k, 2, 2), 1288); },
       "offset 1288 is not a multiple of the alignment 32"},
      {"overlap", [&](auto& b) { set64(b, InfoField(b, q4k, 2, 2), 1024); }, "overlap"},
      {"bad type", [&](auto& b) { set32(b, InfoField(b, q4k, 2, 1), 77); },
       "tensor 'blk.0.ffn_gate_exps.weight': unknown ggml type 77"},
      {"not whole blocks", [&](auto& b) { set64(b, InfoField(b, q4k, 2, 0), 128); },
       "its rows of 128 are not whole Q4_K blocks of 256"},
      {"dims", [&](auto& b) { set32(b, InfoField(b, q4k, 2, 0) - 4, 9); }, "has 9 dimensions"},
      {"row bytes overflow",  // 2^62 F32 values: the elements fit in int64, their bytes do not
       [&](auto& b) {
         const size_t dims = InfoField(b, "token_embd.weight", 2, 0);
         set64(b, dims, uint64_t{1} << 62);
         set64(b, dims + 8, 1);
       },
       "tensor 'token_embd.weight': its size overflows"},
      {"size overflow", [&](auto& b) { set64(b, InfoField(b, q4k, 2, 0) + 8, uint64_t{1} << 62); },
       "its size overflows"},
  };
  const std::string dir = ScratchDir();
  for (const Damage& d : damages) {
    SCOPED_TRACE(d.what);
    std::vector<uint8_t> b = good;
    d.apply(b);
    const std::string path = dir + "/damaged.gguf";
    WriteBytes(path, b);
    auto g = Gguf::Open(path);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find(d.error), std::string::npos) << g.status().message();
    EXPECT_EQ(g.status().message().rfind(path, 0), 0u) << "names the file";
  }
}

TEST(GgufReader, RefusesBadMetadata) {
  const std::string dir = ScratchDir();
  auto open_with = [&](Builder& b) {
    WriteBytes(dir + "/m.gguf", b.Bytes());
    auto g = Gguf::Open(dir + "/m.gguf");
    return g.ok() ? std::string("opened") : g.status().message();
  };
  {
    Builder b;
    b.Str("a", "x");
    b.Str("a", "y");
    EXPECT_NE(open_with(b).find("key 'a' appears twice"), std::string::npos);
  }
  {
    Builder b;
    b.U16("general.alignment", 64);  // must be a u32
    EXPECT_NE(open_with(b).find("general.alignment must be a u32"), std::string::npos);
  }
  {
    Builder b;  // an array of arrays
    b.PutString(b.kv, "nested");
    b.Put<uint32_t>(b.kv, 9);
    b.Put<uint32_t>(b.kv, 9);
    b.Put<uint64_t>(b.kv, 1);
    ++b.n_kv;
    EXPECT_NE(open_with(b).find("key 'nested': arrays of arrays are not read"), std::string::npos);
  }
  {
    Builder b;  // a string array that claims more elements than the file holds
    b.PutString(b.kv, "tokens");
    b.Put<uint32_t>(b.kv, 9);
    b.Put<uint32_t>(b.kv, 8);
    b.Put<uint64_t>(b.kv, uint64_t{1} << 50);
    ++b.n_kv;
    EXPECT_NE(open_with(b).find("elements do not fit in the file"), std::string::npos);
  }
  {
    Builder b;
    b.Tensor("t", {2}, gguf::kF32, Floats({1, 2}));
    b.Tensor("t", {2}, gguf::kF32, Floats({1, 2}));
    EXPECT_NE(open_with(b).find("tensor 't' appears twice"), std::string::npos);
  }
  {
    Builder b;
    b.Tensor(std::string(64, 'n'), {2}, gguf::kF32, Floats({1, 2}));
    EXPECT_NE(open_with(b).find("64 bytes, more than 63"), std::string::npos);
  }
}

}  // namespace
}  // namespace waste
