set terminal pngcairo size 900,600 noenhanced
set output 'score_vs_compression.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'score (0-100) vs compression ratio: SmolLM2-135M-Instruct.Q4_1.gguf'
set key outside right
set grid
set xrange [0:1.02]
plot 'score_vs_compression.dat' index 0 using 1:2 with linespoints lc rgb '#332288' dt 1 pt 1 title 'adakv_expected_attention_e2', 'score_vs_compression.dat' index 1 using 1:2 with linespoints lc rgb '#88CCEE' dt 1 pt 2 title 'expected_attention', 'score_vs_compression.dat' index 2 using 1:2 with linespoints lc rgb '#44AA99' dt 1 pt 3 title 'h2o', 'score_vs_compression.dat' index 3 using 1:2 with linespoints lc rgb '#117733' dt 1 pt 4 title 'knorm', 'score_vs_compression.dat' index 4 using 1:2 with linespoints lc rgb '#999933' dt 1 pt 5 title 'kvzip', 'score_vs_compression.dat' index 5 using 1:2 with linespoints lc rgb '#DDCC77' dt 1 pt 6 title 'kvzip_plus', 'score_vs_compression.dat' index 6 using 1:2 with linespoints lc rgb '#CC6677' dt 1 pt 7 title 'pyramidkv', 'score_vs_compression.dat' index 7 using 1:2 with linespoints lc rgb '#882255' dt 1 pt 8 title 'random', 'score_vs_compression.dat' index 8 using 1:2 with linespoints lc rgb '#AA4499' dt 1 pt 9 title 'snapkv', 'score_vs_compression.dat' index 9 using 1:2 with linespoints lc rgb '#000000' dt 1 pt 10 title 'streaming_llm', 'score_vs_compression.dat' index 10 using 1:2 with linespoints lc rgb '#332288' dt 2 pt 12 title 'tova'
