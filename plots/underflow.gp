# underflow.gp — activation-gradient underflow rate as a heatmap: layers across, methods down,
# log colour scale, the model's stages (name prefixes) marked. A heatmap because ten methods
# over a hundred layers drawn as lines hide each other.
# Variables: in (TSV layer method_index rate_pct, blank line between methods; NaN where
# nothing underflowed), methods (space-separated labels, top to bottom), stages
# (space-separated "name:first:last" layer ranges), out, ext; heading (optional: the title,
# for rows that are not methods, as the what-if recipes).
load "plots/common.gp"
if (!exists("heading")) heading = "Activation gradients flushed to zero, per layer and method (flushed / nonzero, summed over statistics steps;\ngrey: none flushed). fp16 rows: their FP16 casts; fp32, tf32 and fixed16 rows: what an FP16 cast would flush;\nbf16 and fp8 rows: their BF16 casts (8 exponent bits: next to none)"
set title headline(heading) font ",11" noenhanced
set xlabel "layer (forward order)"
unset grid
set tics out nomirror
nm = words(methods)
set yrange [nm - 0.5 : -0.5]
set ytics () font ",10" noenhanced
do for [j = 1:nm] { set ytics add (word(methods, j) j - 1) }
set autoscale noextend
set object 1 rectangle from graph 0, graph 0 to graph 1, graph 1 behind fc rgb "#d9d9d9" fs solid noborder
set logscale cb
set format cb "10^{%L}"
set cblabel "underflow rate (%)"
set palette defined (0 "#ffffd4", 1 "#fec44f", 2 "#d95f0e", 3 "#662506")
ns = words(stages)
prev_big = 0
field(s, i) = (i == 1) ? substr(s, 1, strstrt(s, ":") - 1) : \
              (i == 2) ? substr(s, strstrt(s, ":") + 1, strstrt(s[strstrt(s, ":") + 1:], ":") + strstrt(s, ":") - 1) : \
              s[strstrt(s, ":") + strstrt(s[strstrt(s, ":") + 1:], ":") + 1:]
set tmargin 8.5
do for [i = 1:ns] {
    s = word(stages, i)
    a = real(field(s, 2)); b = real(field(s, 3))
    big = (b - a >= 1) || (i > 1 && prev_big)
    if (i > 1 && big) { set arrow from a - 0.5, graph 0 to a - 0.5, graph 1 nohead lc rgb "#444444" lw 1 front }
    if (b - a >= 2) { set label field(s, 1) at (a + b) / 2.0, graph 1.03 center font ",10" noenhanced }
    prev_big = (b - a >= 1)
}
plot in using 1:2:3 with image
