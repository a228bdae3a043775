# common.gp — terminal and style shared by every figure. Variables: out (path without
# extension), ext ("png" or "svg").
if (ext eq "svg") {
    set terminal svg size 1000,600 dynamic font "Helvetica,13" background "white"
} else {
    set terminal pngcairo size 1000,600 font "Helvetica,12" background "white"
}
set output out.".".ext
set datafile separator "\t"
set key noautotitle
set grid lc rgb "#dddddd"
set border lc rgb "#444444"
# One colour per method across every figure of a model: figures.sh gives each method its index
# in the model's method lists (variable `colours`), and style i is that colour.
array palette24[24] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", \
    "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000", "#aec7e8", "#ffbb78", "#98df8a", \
    "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#dbdb8d", "#9edae5", "#393b79", "#637939", \
    "#8c6d31", "#843c39"]
do for [i = 1:24] { set style line i lc rgb palette24[i] lw 2 }
set style increment user
# The first title line of every figure: model, scale and the seeds drawn (figures.sh: `tag`).
if (!exists("tag")) tag = ""
headline(t) = (tag eq "" ? t : tag . "\n" . t)
