# dynamic_scale.gp — the dynamic loss scale over training, skipped steps marked.
# Variables: in (the `mpx export train` TSV of the dynamic run), out, ext.
load "plots/common.gp"
set title "Dynamic loss scaling: the scale at the loss\nand the steps skipped for Inf/NaN gradients" font ",12"
set xlabel "step"
set ylabel "loss scale"
# A scale that never moved (no overflow and fewer steps than growth_interval) would leave an
# empty y range: give it one binade either side.
stats in using 5 every ::1 nooutput
skipped = int(STATS_sum)
stats in using 4 every ::1 nooutput
if (STATS_min == STATS_max) set yrange [STATS_min / 2 : STATS_max * 2]
set logscale y 2
set format y "2^{%L}"
set key top right
plot in using 1:4 every ::1 with steps lw 2 title "loss scale", \
     in using 1:($5 > 0 ? $4 : NaN) every ::1 with points pt 7 ps 0.8 lc rgb "#d62728" title sprintf("skipped step (%d in all)", skipped)
