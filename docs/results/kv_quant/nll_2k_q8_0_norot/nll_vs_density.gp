set terminal pngcairo size 900,600 noenhanced
set output 'nll_vs_density.png'
set xlabel 'density (kept fraction beyond the window)'
set ylabel 'NLL (nats/token)'
set title 'NLL (nats/token) vs density (kept fraction beyond the window): SmolLM2-135M-Instruct.Q4_1.gguf'
set key outside right
set grid
set xrange [0:1.02]
plot 'nll_vs_density.dat' index 0 using 1:2 with linespoints lc rgb '#332288' dt 1 pt 1 title 'kvzap'
