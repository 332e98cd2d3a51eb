"""Name patterns that identify what an event is, across CUDA, ROCm and PyTorch versions.

Every analysis that classifies events by name reads its regular expressions from here, so
the vocabulary is reviewed in one place.  Patterns are case-sensitive unless they start
with ``(?i)``.
"""

from __future__ import annotations

#: ProfilerStep#N written by torch.profiler's step()
PROFILER_STEP = r"^ProfilerStep#(\d+)$"
#: user / NVTX step ranges: "step 3", "step#3", "train_step 3", "iteration 12", "tracekit.step#4"
USER_STEP = r"(?i)^(?:tracekit\.)?(?:train[_ ]?)?(?:step|iteration|iter)[\s#_:=-]*(\d+)$"
#: optimizer step annotations (torch adds "Optimizer.step#SGD.step")
OPTIMIZER_STEP = r"^Optimizer\.step#"
#: DataLoader fetches and data pipeline work
DATALOADER = (
    r"(?i)(enumerate\(DataLoader\)|DataLoader|_next_data|__next__|collate|DataPipe|"
    r"fetch.?batch|data[_ ]?load|^tracekit\.data|load_batch|get_batch)"
)
#: host calls that block until the GPU finished something
SYNC_API = (
    r"^(cudaDeviceSynchronize|cudaStreamSynchronize|cudaEventSynchronize|cudaThreadSynchronize|"
    r"cuCtxSynchronize|cuStreamSynchronize|cuEventSynchronize|"
    r"hipDeviceSynchronize|hipStreamSynchronize|hipEventSynchronize)(_v\d+)?$"
)
#: synchronous (blocking) copies: the non-Async memcpy family
BLOCKING_MEMCPY_API = r"^(cudaMemcpy|cudaMemcpy2D|cudaMemcpy3D|cudaMemcpyToSymbol|cudaMemcpyFromSymbol|cuMemcpyDtoH|cuMemcpyHtoD|hipMemcpy|hipMemcpyWithStream|hipMemcpyDtoH|hipMemcpyHtoD)(_v\d+)?$"
#: copy launch calls (async or not)
MEMCPY_API = r"(?i)memcpy"
#: ops whose result the host needs now (data-dependent: they force a sync)
DATA_DEPENDENT_OP = (
    r"^aten::(item|_local_scalar_dense|nonzero|nonzero_static|unique|_unique|_unique2|unique_consecutive|"
    r"masked_select|is_nonzero|equal|allclose|tolist|_assert_async|repeat_interleave)$"
)
#: device memory allocator calls (expensive in steady state)
ALLOCATOR_API = (
    r"^(cudaMalloc|cudaFree|cudaMallocHost|cudaFreeHost|cudaHostAlloc|cudaMallocManaged|"
    r"cuMemAlloc|cuMemFree|cuMemCreate|cuMemMap|cuMemUnmap|cuMemRelease|cuMemAddressReserve|"
    r"hipMalloc|hipFree|hipHostMalloc|hipHostFree|hipExtMallocWithFlags)(_v\d+)?$"
)
#: GPU kernel launch calls
LAUNCH_API = r"(?i)(LaunchKernel|LaunchCooperativeKernel|GraphLaunch|cuLaunch|hipModuleLaunch|hipExtLaunch|Launch)"
#: communication kernels: NCCL/RCCL by name, including newer names and collectives not named "nccl"
COMM_KERNEL = (
    r"(?i)(nccl|rccl|AllReduce|all_reduce|AllGather|all_gather|ReduceScatter|reduce_scatter|"
    r"AllToAll|all_to_all|alltoall|Broadcast|SendRecv|msccl|cross_device_reduce|custom_all_reduce|"
    r"one_shot_all_reduce|two_shot_all_reduce|multimem)"
)
#: CPU-side collective calls (waiting on communication)
COMM_OP = r"(?i)^(nccl:|gloo:|c10d::|record_param_comms|.*all_reduce|.*allreduce|.*all_gather|.*reduce_scatter|.*broadcast_|.*barrier|.*wait$)"
#: matrix-multiply and convolution kernels
GEMM_KERNEL = (
    r"(?i)(gemm|gemv|cutlass|cublas|xmma|hmma|wgmma|matmul|conv|implicit_convolve|wgrad|dgrad|fprop|"
    r"nhwc.*(bn|relu)|cudnn|ampere_|volta_|turing_|sm80_|sm90_|sm100_|Cijk_)"
)
#: tensor-core (or matrix-core) kernel names: fp16/bf16/tf32/fp8 MMA paths
TENSOR_CORE_KERNEL = (
    r"(?i)(tensorop|hmma|wgmma|xmma|mma|h884|h1688|h16816|s1688|s16816|i8816|bf16|f16|fp16|half|tf32|"
    r"fp8|e4m3|e5m2|_16x|884gemm|1688gemm|16816gemm|MFMA|Cijk_.*(HH|BB|HS|BS)|sm90_|sm100_)"
)
#: fp32 GEMM names that do not use tensor cores: SIMT kernels, and cuBLAS xmma kernels whose
#: type signature (inputs, compute, output: ``_f32f32_f32f32_f32_``) is plain fp32 with no tf32,
#: which run on the FMA units of an sm80/sm90 GPU although "xmma" is in the name
FP32_GEMM_KERNEL = (
    r"(?i)(sgemm|simt_sgemm|gemmSN|gemmk1|gemv2T_kernel_val<.*float|cutlass_.*_simt_s|Cijk_.*SS_|"
    r"(xmma|gemm|conv)\w*_f32f32_f32f32_f32(_|$))"
)

#: calls that are one-time costs by nature: CUDA context and library initialisation, module
#: loading (lazy loading happens inside the first launch of each kernel), handle creation,
#: cuDNN/cuBLAS autotuning; long ones in the profiled window are warm-up, not the steady state
WARMUP_API = (
    r"^(cuInit|cuDevicePrimaryCtxRetain|cuCtxCreate|cudaSetDevice|cudaGetDeviceCount|cudaGetDeviceProperties|"
    r"cudaDeviceGetStreamPriorityRange|cudaStreamCreate\w*|cuStreamCreate\w*|cudaEventCreate\w*|"
    r"cuModuleLoad\w*|cuLibraryLoad\w*|cuModuleGetFunction|cuLibraryGetKernel|cudaFuncGetAttributes|"
    r"cudaFuncSetAttribute|cudaOccupancy\w*|cublasCreate\w*|cublasLtCreate|cudnnCreate|hipInit|hipSetDevice|"
    r"hipGetDeviceProperties\w*|hipStreamCreate\w*|hipModuleLoad\w*)(_v\d+)?$"
)
#: operators and ranges that are warm-up or autotuning by name
WARMUP_RANGE = r"(?i)(warm[-_ ]?up|autotun|cudnnFind|benchmark_limit|_find_algorithm|cudnn::find)"

#: a torch.compile'd region's call (Dynamo's frame wrapper, the AOTAutograd function it runs)
COMPILED_REGION = r"^(Torch-Compiled Region|CompiledFunction|CompiledFunctionBackward)\b"
#: compilation itself, where the profiler recorded it (``dynamo_timed`` ranges, Inductor's
#: compile and autotuning, Triton's compiler)
COMPILE_WORK = (
    r"(?i)(dynamo_timed|entire_frame_compile|compile_inner|_compile\.|compile_fx|inductor_compile|"
    r"call_user_compiler|aot_autograd|create_aot_dispatcher|async_compile|triton\.compile|compile_file|"
    r"CachingAutotuner|benchmark_all_configs|autotune_select)"
)
