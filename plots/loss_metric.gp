# loss_metric.gp — training loss (top) and evaluation metric (bottom) per method.
# Variables: files (space-separated "train.tsv|eval.tsv|label"; train.tsv: step, mean loss of
# the trailing window), window (its length in steps), out, ext.
load "plots/common.gp"

n = words(files)
field(i, k) = (s = word(files, i), k == 1 ? substr(s, 1, strstrt(s, "|") - 1) : \
    (r = substr(s, strstrt(s, "|") + 1, 999), k == 2 ? substr(r, 1, strstrt(r, "|") - 1) : \
    substr(r, strstrt(r, "|") + 1, 999)))
set multiplot layout 2,1
set xrange [0:*]          # both panels from step 0 to the last step, so that they line up
set autoscale xfixmax
set key outside right top font ",10"
set title sprintf("Training loss (mean of the last %s steps; a gap: non-finite throughout)", window) font ",12"
set ylabel "loss"
set logscale y
# Past the ten colours of common.gp, lines repeat them dashed.
plot for [i = 1:n] field(i, 1) using 1:2 every ::1 with lines ls ((i - 1) % 10 + 1) lw 1.5 \
    dt 1 + (i > 10) title field(i, 3) noenhanced
unset logscale y
set title "Evaluation metric" font ",12"
set xlabel "step"
set ylabel "metric (%)"
plot for [i = 1:n] field(i, 2) using 1:3 every ::1 with linespoints ls ((i - 1) % 10 + 1) \
    dt 1 + (i > 10) pt 7 ps 0.6 title field(i, 3) noenhanced
unset multiplot
