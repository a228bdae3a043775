# dynamic_scale.gp — the dynamic loss scale over training, skipped steps marked.
# Variables: in (the `mpx export train` TSV of the dynamic run), out, ext.
load "plots/common.gp"
set title "Dynamic loss scaling: the scale at the loss\nand the steps skipped for Inf/NaN gradients" font ",12"
set xlabel "step"
set ylabel "loss scale"
set logscale y 2
set format y "2^{%L}"
set key top right
plot in using 1:4 every ::1 with steps lw 2 title "loss scale", \
     in using 1:($5 > 0 ? $4 : NaN) every ::1 with points pt 7 ps 0.8 lc rgb "#d62728" title "skipped step"
