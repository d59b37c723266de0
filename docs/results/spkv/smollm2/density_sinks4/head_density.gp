set terminal pngcairo size 490,680 noenhanced
set output 'head_density.png'
set title 'SmolLM2-135M-Instruct-spkv-frozen: spkv:tau=0.5,sinks=4'
set xlabel 'KV head'
set ylabel 'layer'
set cblabel 'density'
set cbrange [0:1]
set palette rgb 21,22,23
set xrange [-0.5:2.5]
set yrange [29.5:-0.5]
set xtics 1
set ytics 2
plot 'head_density.dat' matrix with image notitle
