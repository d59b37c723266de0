set terminal pngcairo size 1300,300 noenhanced
set output 'recall.png'
set multiplot layout 1,4 title 'teacher top-k retention recall per (layer, KV head)'
set cbrange [0:1]
set palette rgb 33,13,10
set xlabel 'KV head'
set ylabel 'layer'
set xrange [-0.5:1.5]
set yrange [3.5:-0.5]
set xtics 1
set ytics 1
set title 'tiny2k-mlstm'
plot 'recall_tiny2k-mlstm.dat' matrix with image notitle
set title 'tiny2k-mlstm-immediate'
plot 'recall_tiny2k-mlstm-immediate.dat' matrix with image notitle
set title 'tiny2k-mlp'
plot 'recall_tiny2k-mlp.dat' matrix with image notitle
set title 'recent'
plot 'recall_recent.dat' matrix with image notitle
unset multiplot
