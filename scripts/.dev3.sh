export LD_LIBRARY_PATH=$PWD/.gpu/lib:/usr/local/nvidia/lib64
export TK_CUBLASLT=/usr/local/cuda/lib64/libcublasLt.so.13
cd .gpu/bin
run() { timeout 300 ./$1 --jobs=3 > $OUT/t_$1.log 2>&1; echo "rc=$?" >> $OUT/t_$1.log; }
(run test_gpu_gemm; run test_gpu_kernels; run test_reference) &
(run test_gpu_block; run test_gpu_moe_gate; run test_gpu_moe_route) &
(run test_gpu_swiglu; run test_gpu_fp4; run test_gpu_channel; run test_gpu_moe_fused; run test_runtime) &
wait
for f in $OUT/t_*.log; do echo "$(basename $f): $(grep -h 'Synthesis' $f | tail -n 1) $(tail -n 1 $f)"; done | tee $OUT/tests_summary.txt
for f in $OUT/t_*.log; do grep -q "rc=0" $f && rm $f; done
cuobjdump -sass ../tk_kernels.cubin > /tmp/sass.txt 2>&1
for f in $(grep -o "Function : [a-z_0-9]*gemm[a-z_0-9]*" /tmp/sass.txt | awk '{print $3}'); do
  awk -v f="$f" '$0 ~ "Function : "f"$" {p=1; next} /Function :/ {p=0} p' /tmp/sass.txt > /tmp/one.txt
  echo "$f HGMMA=$(grep -c HGMMA /tmp/one.txt) QGMMA=$(grep -c QGMMA /tmp/one.txt) UTMALDG=$(grep -c UTMALDG /tmp/one.txt) USETMAXREG=$(grep -c USETMAXREG /tmp/one.txt) LDL_STL=$(grep -c 'LDL\|STL' /tmp/one.txt)"
done > $OUT/sass_gemm.txt
grep -c "LDL\|STL" /tmp/sass.txt > $OUT/sass_local_total.txt
timeout 300 ./tkbench --iters 30 --csv $OUT/bench.csv > $OUT/bench.txt 2> $OUT/bench.err
echo bench rc=$?
