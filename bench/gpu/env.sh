# Sourced by the bench/gpu scripts after they set $pack: the library path for a packed folder on
# the GPU machine (the pack's own libraries, the system's NCCL, and the machine's CUDA runtime
# libraries such as cuBLAS) and NCCL_NVLS_ENABLE=0 unless the caller set it.
cuda_lib=""
for d in /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13.0/targets/x86_64-linux/lib /usr/local/cuda/lib64; do
  if [ -d "$d" ]; then cuda_lib=$d; break; fi
done
export LD_LIBRARY_PATH="$pack/lib:/usr/lib/x86_64-linux-gnu${cuda_lib:+:$cuda_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
