// malloc_tuning: glibc malloc settings for processes that move multi-megabyte messages.
//
// Why: a buffer that glibc serves with a fresh mmap() must be page-faulted in on first touch, one
// 4 KiB page at a time. On the VMs Osprey runs on a fault costs ~2-10 us, i.e. 0.4-2 GB/s -- slower
// than the network path it feeds -- and glibc's defaults hit it on every large message:
//   - requests above M_MMAP_THRESHOLD (128 KiB, adapting up to 32 MiB) are mmap'ed and unmapped
//     again on free, so every 64 MiB message (ZeroMQ's receive buffer, our Buffer::Allocate)
//     starts cold;
//   - freed memory at the top of the heap above M_TRIM_THRESHOLD goes back to the OS;
//   - threads other than main allocate from per-thread arenas whose heaps are at most 64 MiB,
//     so a larger request there is mmap'ed whatever the threshold. ZeroMQ allocates each received
//     message (one malloc of the message size) on its own I/O thread, i.e. in such an arena.
// TuneMallocForLargeMessages() therefore
//   - raises M_MMAP_THRESHOLD to 1 GiB and M_TRIM_THRESHOLD to 1 GiB: large buffers come from and
//     return to the heap, and a freed 64 MiB buffer is reused warm by the next message;
//   - sets M_ARENA_MAX to 1: every thread allocates from the main arena, the only one that can
//     hold blocks above 64 MiB. The cost is one lock shared by all threads for allocations that
//     miss glibc's per-thread cache (blocks above ~1 KiB); Osprey allocates per message, not per
//     element, so the lock is not hot. (Measured, 64 MiB push over loopback: see the transport
//     benchmark in bench/transport_raw.)
// The price is memory: the heap keeps its high-water mark instead of returning freed blocks.
//
// Threading: call once, first thing in main(), before any thread (ZeroMQ's included) exists --
// a thread that has already allocated keeps its arena. Only *_main.cc files call it; libraries
// and tests never change process-wide allocator settings.
#pragma once

namespace osprey {

// Applies the settings above; a setting glibc refuses is left at its default (no error: the
// process still works, only slower for large messages). A no-op when not built against glibc.
void TuneMallocForLargeMessages();

}  // namespace osprey
