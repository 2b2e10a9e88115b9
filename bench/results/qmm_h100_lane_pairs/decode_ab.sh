# decode_ab.sh OUTDIR, TREES=folder of the trees: mc = main at 8331959, lp = it with
# lane_pairs.patch; both with a scratch switch (TILEVM_MINCTASM) in codegen adding
# `.minnctapersm N` to the decode kernel (not in main). Part 1: default schedules, with
# and without the cap; part 2: tuned schedules.
# Part 1: rounds main, lane_pairs, each with and without the register cap
set -e
D=int3,int4,int5,f6e3m2,int6,int8,f4e2m1,int2
S=8b.qkv,70b.qkv,70b.o,70b.gate_up,70b.down
for r in 1 2; do
 for t in mc lp; do for c in 0 4; do
  if [ $c = 0 ]; then unset TILEVM_MINCTASM; else export TILEVM_MINCTASM=$c; fi
  TILEVM_CACHE_DIR=/tmp/tvc_$t$c python3 decode_ab.py $TREES/$t $t $1/decode_default_ab.jsonl $D $S 1,16 > /dev/null
 done; done
done
# Part 2: tuned decode, rounds main, lp, lp, main (first two tune)
D=int3,int5,f6e3m2,int6
S=8b.qkv,70b.qkv,70b.o,70b.gate_up,70b.down
unset TILEVM_MINCTASM
export TUNE=1
for t in mc lp lp mc; do
  TILEVM_CACHE_DIR=/tmp/tvt_$t python3 decode_ab.py $TREES/$t $t $1/decode_tuned_ab.jsonl $D $S 1,16 > /dev/null || echo FAIL $t
done
