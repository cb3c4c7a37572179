# The PyTorch example under the shim (issue 21): examples/pytorch_train.py, a small ResNet trained
# data-parallel with per-parameter mpi4py Iallreduce hooks (no torch.distributed). On a slice of
# Fashion-MNIST it must go through the shim's fused MPI_Iallreduce (its fc gradient, 1.6 MB, is
# above the fusion and compression minimums; the small ones are the MPI's own), learn, and end
# with bit-identical parameters and buffers on every rank, exact and with fp16 on the wire.
# About 6 s each on this busy 2-core machine. Debian's python3-torch and python3-mpi4py are built
# for Open MPI, and /usr/bin/python3 must import them: checked here, once, at configure time.
if(NOT GFSHIM_MPI STREQUAL "openmpi")
  return()
endif()
set(gfshim_pytorch_python /usr/bin/python3)
if(EXISTS ${gfshim_pytorch_python})
  execute_process(COMMAND ${gfshim_pytorch_python} -c "import numpy, torch, mpi4py"
                  RESULT_VARIABLE gfshim_pytorch_status OUTPUT_QUIET ERROR_QUIET TIMEOUT 120)
  if(gfshim_pytorch_status MATCHES "^[0-9]+$" AND NOT gfshim_pytorch_status STREQUAL "0")
    set(gfshim_pytorch_status "exit status ${gfshim_pytorch_status}")
  endif()
else()
  set(gfshim_pytorch_status "no ${gfshim_pytorch_python}")
endif()
if(NOT gfshim_pytorch_status STREQUAL "0")
  message(STATUS "PyTorch example tests: off: ${gfshim_pytorch_python} cannot import numpy, "
                 "torch and mpi4py (${gfshim_pytorch_status}; Debian: apt-get install "
                 "python3-torch python3-mpi4py)")
  return()
endif()

set(gfshim_pytorch_args --epochs 1 --train-samples 8000 --test-samples 2000 --batch 128)
foreach(codec exact fp16)
  set(gfshim_pytorch_env --env OMP_NUM_THREADS=1)
  set(gfshim_pytorch_expect "")
  if(codec STREQUAL "fp16")
    list(APPEND gfshim_pytorch_env --env GFSHIM_COMPRESS=fp16)
    set(gfshim_pytorch_expect --expect "GFSHIM STATS lossy fp16 +[1-9][0-9]* calls")
  endif()
  add_test(NAME mpi_example_pytorch_${codec}
           COMMAND ${GFSHIM_RUN} --np 2 ${gfshim_pytorch_env} --expect-engine
                   --expect "GFSHIM STATS fusion +[1-9][0-9]* operations"
                   ${gfshim_pytorch_expect}
                   --expect "^final test_acc 0\\.[6-9][0-9]* .* weights_identical yes"
                   -- ${gfshim_pytorch_python} ${PROJECT_SOURCE_DIR}/examples/pytorch_train.py
                   ${gfshim_pytorch_args})
  set_tests_properties(mpi_example_pytorch_${codec} PROPERTIES TIMEOUT 300)
endforeach()
