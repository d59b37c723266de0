set terminal pngcairo size 1300,700 noenhanced
set output 'recall.png'
set multiplot layout 1,4 title 'teacher top-k retention recall per (layer, KV head)'
set cbrange [0:1]
set palette rgb 33,13,10
set xlabel 'KV head'
set ylabel 'layer'
set xrange [-0.5:2.5]
set yrange [29.5:-0.5]
set xtics 1
set ytics 2
set title 'smollm2-135m-mlstm'
plot 'recall_smollm2-135m-mlstm.dat' matrix with image notitle
set title 'smollm2-135m-mlstm-immediate'
plot 'recall_smollm2-135m-mlstm-immediate.dat' matrix with image notitle
set title 'smollm2-135m-mlp'
plot 'recall_smollm2-135m-mlp.dat' matrix with image notitle
set title 'recent'
plot 'recall_recent.dat' matrix with image notitle
unset multiplot
