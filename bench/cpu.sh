# bench/cpu.sh: CPU accounting shared by the benchmark scripts (sourced).

# ticks PID...: their user+system clock ticks, summed (gone ones count 0).
ticks() {
    local t=0 p f
    for p in "$@"; do
        f=$(cat "/proc/$p/stat" 2>/dev/null) || continue
        f=${f##*) }
        set -- $f
        t=$((t + ${12} + ${13}))
    done
    echo "$t"
}

# jobs_succeeded: the jobs that have succeeded since gpuqd started, from its
# /metrics text on stdin (the counter gpuq_jobs_finished_total, summed over
# its labels). Not the gauge gpuq_jobs{state="succeeded"}: that counts the
# jobs held in memory, and past keep_finished_max (100,000) finished jobs
# leave it, so a long or fast run would count too few.
jobs_succeeded() {
    awk '/^gpuq_jobs_finished_total\{.*state="succeeded"/ { n += $NF } END { printf "%d\n", n }'
}
