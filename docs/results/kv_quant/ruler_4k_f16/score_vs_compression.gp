set terminal pngcairo size 900,600 noenhanced
set output 'score_vs_compression.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'score (0-100) vs compression ratio: SmolLM2-135M-Instruct.Q4_1.gguf'
set key outside right
set grid
set xrange [0:1.02]
plot 'score_vs_compression.dat' index 0 using 1:2 with linespoints lc rgb '#332288' dt 1 pt 1 title 'wgkv:model=models/wgkv/smollm2-135m-lambda0.04,sinks=4', 'score_vs_compression.dat' index 1 using 1:2 with linespoints lc rgb '#88CCEE' dt 1 pt 2 title 'kvpop', 'score_vs_compression.dat' index 2 using 1:2 with linespoints lc rgb '#44AA99' dt 1 pt 3 title 'kvzap', 'score_vs_compression.dat' index 3 using 1:2 with linespoints lc rgb '#117733' dt 1 pt 4 title 'wgkv'
