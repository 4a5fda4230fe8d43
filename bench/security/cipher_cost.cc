// Where CURVE's time goes: one thread's CPU time per message for libzmq's cipher
// (crypto_box_easy_afternm: XSalsa20-Poly1305, libsodium), libsodium's AES-256-GCM and
// ChaCha20-Poly1305-IETF, the sealed data plane's cipher (common/zmq_seal: OpenSSL AES-256-GCM,
// sealing three frames and opening them in place), and a plain copy.
//   build-cpu/bench/security/osprey-bench-cipher-cost
#include <sodium.h>

#include "common/malloc_tuning.h"
#include "common/zmq_seal.h"
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
#include <time.h>
int g_sink = 0;  // keeps results of calls whose return value must be used
// Thread CPU time, not wall time: the development VM's 2 cores are shared with other builds.
double CpuUs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}
template <class F> double Us(F f, int reps) {
  f();
  double t0 = CpuUs();
  for (int i = 0; i < reps; ++i) f();
  return (CpuUs() - t0) / reps;
}
int main() {
  if (sodium_init() < 0) return 1;
  osprey::TuneMallocForLargeMessages();  // as the server and worker mains do
  std::printf("(sink %d) ", g_sink);
  std::printf("aes256gcm available: %d\n", crypto_aead_aes256gcm_is_available());
  for (size_t n : {4096ul, 290000ul, 1048576ul}) {
    std::vector<unsigned char> in(n, 7), out(n + 64), out2(n + 64);
    unsigned char pk[32], sk[32], k[32], nonce[24] = {0};
    crypto_box_keypair(pk, sk);
    unsigned char shared[crypto_box_BEFORENMBYTES];
    if (crypto_box_beforenm(shared, pk, sk) != 0) return 1;
    randombytes_buf(k, sizeof k);
    int reps = n < 10000 ? 20000 : 200;
    double cp = Us([&] { std::memcpy(out.data(), in.data(), n); }, reps);
    double box = Us([&] { crypto_box_easy_afternm(out.data(), in.data(), n, nonce, shared); }, reps);
    double boxo = Us([&] { g_sink += crypto_box_open_easy_afternm(out2.data(), out.data(), n + 16, nonce, shared); }, reps);
    unsigned long long cl;
    double gcm = -1, gcmo = -1;
    if (crypto_aead_aes256gcm_is_available()) {
      gcm = Us([&] { crypto_aead_aes256gcm_encrypt(out.data(), &cl, in.data(), n, nonce, 16, nullptr, nonce, k); }, reps);
      gcmo = Us([&] { g_sink += crypto_aead_aes256gcm_decrypt(out2.data(), nullptr, nullptr, out.data(), cl, nonce, 16, nonce, k); }, reps);
    }
    double cc = Us([&] { crypto_aead_chacha20poly1305_ietf_encrypt(out.data(), &cl, in.data(), n, nonce, 16, nullptr, nonce, k); }, reps);
    double cco = Us([&] { g_sink += crypto_aead_chacha20poly1305_ietf_decrypt(out2.data(), nullptr, nullptr, out.data(), cl, nonce, 16, nonce, k); }, reps);
    const osprey::SealKey sk2 = osprey::RandomSealKey();
    osprey::SealedSession a(sk2, 1), b(sk2, 1);
    osprey::Buffer frames[3] = {osprey::Buffer::Copy("h", 1), osprey::Buffer(),
                                osprey::Buffer::Copy(in.data(), n)};
    osprey::Buffer wire[4];
    double seal = Us([&] { g_sink += !a.Seal(osprey::SealDirection::kToListener, frames, wire).ok(); }, reps);
    double open = Us([&] {
      g_sink += !a.Seal(osprey::SealDirection::kToListener, frames, wire).ok();
      uint8_t* p[4];
      size_t sz[4];
      for (int i = 0; i < 4; ++i) {
        p[i] = wire[i].mutable_data();
        sz[i] = wire[i].size();
      }
      g_sink += !b.Open(osprey::SealDirection::kToListener, p, sz).ok();
    }, reps) - seal;
    auto gbs = [&](double us) { return n / us / 1e3; };
    std::printf("%8zu B: memcpy %7.1f us (%5.1f GB/s) | xsalsa20poly1305 seal %7.1f (%4.2f GB/s) open %7.1f | "
                "aes256gcm seal %7.1f (%4.2f GB/s) open %7.1f | chacha20poly1305 seal %7.1f (%4.2f GB/s) open %7.1f | "
                "zmq_seal (OpenSSL AES-256-GCM) seal %7.1f (%4.2f GB/s) open %7.1f\n",
                n, cp, gbs(cp), box, gbs(box), boxo, gcm, gbs(gcm), gcmo, cc, gbs(cc), cco, seal, gbs(seal), open);
  }
}
