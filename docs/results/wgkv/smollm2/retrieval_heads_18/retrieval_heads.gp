set terminal pngcairo size 490,680 noenhanced
set output 'retrieval_heads.png'
set title 'long-range attention mass (outside a window of 256)'
set xlabel 'KV head'
set ylabel 'layer'
set cblabel 'density'
set cbrange [0:1]
set palette rgb 21,22,23
set xrange [-0.5:2.5]
set yrange [29.5:-0.5]
set xtics 1
set ytics 2
plot 'retrieval_heads.dat' matrix with image notitle
