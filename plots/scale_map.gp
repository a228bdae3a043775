# scale_map.gp — adaptive loss scaling: the cumulative scale S each layer's incoming gradient
# carries, over training. Variables: in (the `mpx export scale` TSV: step, layer, name, scale
# first), out, ext; heading, cbl, ylab (optional: title, colour-bar and y labels, for other
# scales). The colour range is that of the steps after the first: a first step at the initial
# scale would pin it and wash out the rest.
load "plots/common.gp"
if (!exists("heading")) heading = "Adaptive loss scaling\nlog2 of the scale carried by each layer's incoming gradient"
if (!exists("cbl")) cbl = "log2 S"
if (!exists("ylab")) ylab = "layer (forward order; the loss at the top)"
set title headline(heading) font ",12" noenhanced
set xlabel "step"
set ylabel ylab
set cblabel cbl
set palette defined (0 "#f7fbff", 3 "#6baed6", 6 "#08519c", 10 "#08306b")
set autoscale noextend  # the map fills the frame: no empty margins to the next tic
stats in using 1 every ::1 nooutput
first = STATS_min
stats in using ($1 > first && $4 > 0 ? log($4) / log(2) : NaN) every ::1 nooutput
if (STATS_records > 0 && STATS_max > STATS_min) set cbrange [STATS_min : STATS_max]
plot in using 1:2:($4 > 0 ? log($4) / log(2) : NaN) every ::1 with image
