# loss_metric.gp — training loss (top, seed 0) and evaluation metric (bottom, every seed: the
# mean line and the band from the lowest to the highest seed) per method.
# Variables: files (space-separated "train.tsv|eval.tsv|label"; train.tsv: step, mean loss of
# the trailing window), bands (one "seeds.tsv" per file, "-" for none; step mean lo hi n),
# colours (one style index per file), metric (the metric's name), window (its length in
# steps), out, ext.
load "plots/common.gp"

n = words(files)
field(i, k) = (s = word(files, i), k == 1 ? substr(s, 1, strstrt(s, "|") - 1) : \
    (r = substr(s, strstrt(s, "|") + 1, 999), k == 2 ? substr(r, 1, strstrt(r, "|") - 1) : \
    substr(r, strstrt(r, "|") + 1, 999)))
colour(i) = int(word(colours, i))
band(i) = word(bands, i)
set multiplot layout 2,1 title tag font ",13"
set xrange [0:*]          # both panels from step 0 to the last step, so that they line up
set autoscale xfixmax
set key outside right top font ",10"
set title sprintf("Training loss, seed 0 (mean of the last %s steps; a gap: non-finite throughout)", window) font ",12"
set ylabel "loss"
set logscale y
plot for [i = 1:n] field(i, 1) using 1:2 every ::1 with lines ls colour(i) lw 1.5 title field(i, 3) noenhanced
unset logscale y
set title sprintf("Held-out %s: the mean over the seeds, a band from the lowest to the highest", metric) font ",12"
set xlabel "step"
set ylabel metric noenhanced
set style fill transparent solid 0.15 noborder
plot for [i = 1:n] (band(i) eq "-" ? field(i, 2) : band(i)) using 1:(band(i) eq "-" ? NaN : $3):4 \
        every ::1 with filledcurves ls colour(i) notitle, \
     for [i = 1:n] (band(i) eq "-" ? field(i, 2) : band(i)) using 1:(band(i) eq "-" ? $3 : $2) \
        every ::1 with linespoints ls colour(i) pt 7 ps 0.6 title field(i, 3) noenhanced
unset multiplot
