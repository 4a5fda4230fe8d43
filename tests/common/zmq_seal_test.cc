// SealedSession (common/zmq_seal.h): what the sealed data plane opens and what it refuses -- a
// tampered frame or header, a replayed or reordered message, another session's key, a message
// reflected back in the other direction.
#include "common/zmq_seal.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace osprey {
namespace {

// A sealed message as the receiver gets it: four writable frames.
struct Wire {
  std::vector<std::string> frames;
  Status Open(SealedSession* s, SealDirection dir) {
    uint8_t* data[4];
    size_t sizes[4];
    for (int i = 0; i < 4; ++i) {
      data[i] = reinterpret_cast<uint8_t*>(frames[i].data());
      sizes[i] = frames[i].size();
    }
    Status st = s->Open(dir, data, sizes);
    if (st.ok()) {
      for (int i = 0; i < 4; ++i) frames[i].resize(sizes[i]);
    }
    return st;
  }
};

Wire Seal(SealedSession* s, SealDirection dir, const std::string& h, const std::string& k,
          const std::string& v) {
  Buffer in[3] = {Buffer::Copy(h.data(), h.size()), Buffer::Copy(k.data(), k.size()),
                  Buffer::Copy(v.data(), v.size())};
  Buffer out[4];
  EXPECT_TRUE(s->Seal(dir, in, out).ok());
  Wire w;
  for (const Buffer& b : out) w.frames.emplace_back(reinterpret_cast<const char*>(b.data()), b.size());
  return w;
}

class SealTest : public ::testing::Test {
 protected:
  SealKey key_ = RandomSealKey();
  uint64_t id_ = RandomSessionId();
  SealedSession dialer_{key_, id_}, listener_{key_, id_};
};

TEST_F(SealTest, OpensWhatWasSealedAndHidesIt) {
  const std::string values(300000, 'x');
  Wire w = Seal(&dialer_, SealDirection::kToListener, "header", "", values);
  ASSERT_EQ(w.frames.size(), 4u);
  EXPECT_EQ(w.frames[0].size(), kSealHeaderBytes);
  EXPECT_EQ(w.frames[3].size(), values.size() + kSealTagBytes);
  EXPECT_EQ(w.frames[3].find("xxxxxxxx"), std::string::npos);  // no plaintext on the wire
  uint64_t id = 0;
  ASSERT_TRUE(SealedSessionId(reinterpret_cast<const uint8_t*>(w.frames[0].data()), kSealHeaderBytes, &id));
  EXPECT_EQ(id, id_);
  ASSERT_TRUE(w.Open(&listener_, SealDirection::kToListener).ok());
  EXPECT_EQ(w.frames[1], "header");
  EXPECT_EQ(w.frames[2], "");
  EXPECT_EQ(w.frames[3], values);
  // The reply direction has its own counter.
  Wire r = Seal(&listener_, SealDirection::kToDialer, "r", "k", "v");
  ASSERT_TRUE(r.Open(&dialer_, SealDirection::kToDialer).ok());
  EXPECT_EQ(r.frames[2], "k");
}

TEST_F(SealTest, RefusesATamperedFrameOrHeader) {
  Wire w = Seal(&dialer_, SealDirection::kToListener, "h", "keys", "values");
  Wire header = w, frame = w, swapped = w;
  frame.frames[3][2] ^= 1;
  Status st = frame.Open(&listener_, SealDirection::kToListener);
  EXPECT_EQ(st.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(st.message().find("does not verify"), std::string::npos) << st.ToString();
  header.frames[0][15] ^= 1;  // the counter: authenticated as associated data
  EXPECT_EQ(header.Open(&listener_, SealDirection::kToListener).code(), StatusCode::kPermissionDenied);
  std::swap(swapped.frames[2], swapped.frames[3]);  // frames cannot change places
  EXPECT_EQ(swapped.Open(&listener_, SealDirection::kToListener).code(), StatusCode::kPermissionDenied);
  // None of them moved the counter: the genuine message still opens.
  EXPECT_TRUE(w.Open(&listener_, SealDirection::kToListener).ok());
}

TEST_F(SealTest, RefusesAReplayedOrReorderedMessage) {
  Wire first = Seal(&dialer_, SealDirection::kToListener, "1", "", "");
  Wire second = Seal(&dialer_, SealDirection::kToListener, "2", "", "");
  Wire copy = second;
  ASSERT_TRUE(second.Open(&listener_, SealDirection::kToListener).ok());
  Status replay = copy.Open(&listener_, SealDirection::kToListener);
  EXPECT_EQ(replay.code(), StatusCode::kPermissionDenied);
  EXPECT_NE(replay.message().find("replayed or reordered"), std::string::npos) << replay.ToString();
  EXPECT_EQ(first.Open(&listener_, SealDirection::kToListener).code(), StatusCode::kPermissionDenied);
}

TEST_F(SealTest, RefusesAnotherKeyAnotherSessionAndAReflection) {
  Wire w = Seal(&dialer_, SealDirection::kToListener, "h", "k", "v");
  SealedSession wrong_key(RandomSealKey(), id_);
  Wire a = w;
  EXPECT_EQ(a.Open(&wrong_key, SealDirection::kToListener).code(), StatusCode::kPermissionDenied);
  SealedSession other(key_, id_ + 1);
  Wire b = w;
  EXPECT_EQ(b.Open(&other, SealDirection::kToListener).code(), StatusCode::kPermissionDenied);
  // A dialer's message sent back to the dialer as if the listener had sealed it.
  Wire c = w;
  EXPECT_EQ(c.Open(&dialer_, SealDirection::kToDialer).code(), StatusCode::kPermissionDenied);
  EXPECT_FALSE(SealedSessionId(reinterpret_cast<const uint8_t*>("garbage"), 7, &id_));
}

}  // namespace
}  // namespace osprey
