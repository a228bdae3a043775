# dynamic_scale.gp — the dynamic loss scale over training, skipped steps marked.
# Variables: in (the `mpx export train` TSV of the dynamic run), out, ext. The step axis is
# logarithmic (step + 1): the back-offs of the first steps would sit on the y axis otherwise.
load "plots/common.gp"
set title headline("Dynamic loss scaling: the scale at the loss and the steps skipped for Inf/NaN gradients") font ",12"
set xlabel "step + 1"
set logscale x
set format x "10^{%L}"
set ylabel "loss scale"
# One binade of room above and below the scale's range, so that a scale that never moved (no
# overflow, and fewer finite steps than growth_interval) still has a y range.
stats in using 5 every ::1 nooutput
skipped = int(STATS_sum)
stats in using 1 every ::1 nooutput
set xrange [1 : (STATS_max + 1) * 1.2]
stats in using 4 every ::1 nooutput
set yrange [STATS_min / 2 : STATS_max * 2]
if (STATS_min == STATS_max) {
    set label 1 "the scale never changed: no overflow, and no growth_interval of finite steps" at graph 0.5, graph 0.6 center
}
set logscale y 2
set format y "2^{%L}"
set key top right
plot in using ($1 + 1):4 every ::1 with steps lw 2 title "loss scale", \
     in using ($1 + 1):($5 > 0 ? $4 : NaN) every ::1 with points pt 7 ps 0.8 lc rgb "#d62728" title sprintf("skipped step (%d in all)", skipped)
