set terminal pngcairo size 900,600 noenhanced
set output 'nll_vs_density.png'
set xlabel 'density (kept fraction beyond the window)'
set ylabel 'NLL (nats/token)'
set title 'NLL (nats/token) vs density (kept fraction beyond the window): SmolLM2-135M-Instruct.Q4_1.gguf'
set key outside right
set grid
set xrange [0:1.02]
plot 'nll_vs_density.dat' index 0 using 1:2 with linespoints lc rgb '#332288' dt 1 pt 1 title 'adakv_expected_attention_e2', 'nll_vs_density.dat' index 1 using 1:2 with linespoints lc rgb '#88CCEE' dt 1 pt 2 title 'expected_attention', 'nll_vs_density.dat' index 2 using 1:2 with linespoints lc rgb '#44AA99' dt 1 pt 3 title 'h2o', 'nll_vs_density.dat' index 3 using 1:2 with linespoints lc rgb '#117733' dt 1 pt 4 title 'knorm', 'nll_vs_density.dat' index 4 using 1:2 with linespoints lc rgb '#999933' dt 1 pt 5 title 'pyramidkv', 'nll_vs_density.dat' index 5 using 1:2 with linespoints lc rgb '#DDCC77' dt 1 pt 6 title 'random', 'nll_vs_density.dat' index 6 using 1:2 with linespoints lc rgb '#CC6677' dt 1 pt 7 title 'snapkv', 'nll_vs_density.dat' index 7 using 1:2 with linespoints lc rgb '#882255' dt 1 pt 8 title 'streaming_llm', 'nll_vs_density.dat' index 8 using 1:2 with linespoints lc rgb '#AA4499' dt 1 pt 9 title 'tova'
