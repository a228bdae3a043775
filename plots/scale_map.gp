# scale_map.gp — adaptive loss scaling: the cumulative scale S each layer's incoming gradient
# carries, over training. Variables: in (the `mpx export scale` TSV), out, ext.
load "plots/common.gp"
set title "Adaptive loss scaling\nlog2 of the scale carried by each layer's incoming gradient" font ",12"
set xlabel "step"
set ylabel "layer (forward order; the loss at the top)"
set cblabel "log2 S"
set palette defined (0 "#f7fbff", 3 "#6baed6", 6 "#08519c", 10 "#08306b")
set autoscale noextend  # the map fills the frame: no empty margins to the next tic
plot in using 1:2:(log($4) / log(2)) every ::1 with image
