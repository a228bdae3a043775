# hist.gp — a pooled gradient histogram over log2 binades with the FP16 regions marked.
# Variables: in (TSV: bin count pct; bins -64..15 then "zero"), title, subtitle (a second
# title line, optional), out, ext. The right axis reads the same bars as percent of the nonzero
# values, the share the cast counts refer to.
load "plots/common.gp"
if (!exists("subtitle")) subtitle = ""
set title headline(subtitle eq "" ? title : title . "\n" . subtitle) font ",13"
set xlabel "log2 |value|   (bin k holds [2^k, 2^{k+1}); the bar at the left is exact zeros)"
set ylabel "percent of values"
set xrange [-67:16.5]
set yrange [0:*]
stats in using (strcol(1) eq "zero" ? $3 : 0) every ::1 nooutput
nonzero = 100 - STATS_sum
if (nonzero > 0) {
    set link y2 via y * 100 / nonzero inverse y * nonzero / 100
    set y2tics 5
    set y2label "percent of nonzero values"
    set ytics nomirror
}
set xtics ("0" -66, "-64" -64, "-56" -56, "-48" -48, "-40" -40, "-32" -32, "-24" -24, "-14" -14, "0" 0, "15" 15)
set style fill solid 0.85 border lc rgb "#333333"
set boxwidth 0.8
# FP16: normal [2^-14, 65504], subnormal [2^-24, 2^-14), flushed to zero below (RNE keeps
# (2^-25, 2^-24) as 2^-24). Shaded behind the bars.
set object 1 rect from -14, graph 0 to 16, graph 1 fc rgb "#d9f0d3" fs solid 0.6 noborder behind
set object 2 rect from -24, graph 0 to -14, graph 1 fc rgb "#fff2b3" fs solid 0.6 noborder behind
set object 3 rect from -64.5, graph 0 to -24, graph 1 fc rgb "#fbd3d3" fs solid 0.6 noborder behind
set label 1 "FP16 normal" at -13.5, graph 0.95 font ",11"
set label 2 "FP16\nsubnormal" at -23.5, graph 0.95 font ",11"
set label 3 "becomes zero in FP16" at -63, graph 0.95 font ",11"
set arrow 1 from -65, graph 0 to -65, graph 1 nohead lc rgb "#888888" dt 2
plot in using (strcol(1) eq "zero" ? -66 : column(1) + 0.5):3 every ::1 with boxes lc rgb "#4c72b0"
