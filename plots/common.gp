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
set style line 1 lc rgb "#1b9e77" lw 2
set style line 2 lc rgb "#d95f02" lw 2
set style line 3 lc rgb "#7570b3" lw 2
set style line 4 lc rgb "#e7298a" lw 2
set style line 5 lc rgb "#66a61e" lw 2
set style line 6 lc rgb "#e6ab02" lw 2
set style line 7 lc rgb "#17becf" lw 2
set style line 8 lc rgb "#666666" lw 2
set style line 9 lc rgb "#1f78b4" lw 2
set style line 10 lc rgb "#000000" lw 2
set style increment user
