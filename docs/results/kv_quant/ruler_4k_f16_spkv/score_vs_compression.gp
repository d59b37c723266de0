set terminal pngcairo size 900,600 noenhanced
set output 'score_vs_compression.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'score (0-100) vs compression ratio: final.gguf'
set key outside right
set grid
set xrange [0:1.02]
plot 'score_vs_compression.dat' index 0 using 1:2 with linespoints lc rgb '#332288' dt 1 pt 1 title 'spkv'
