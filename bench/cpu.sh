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
