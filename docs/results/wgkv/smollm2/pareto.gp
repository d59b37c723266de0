set terminal pngcairo size 1200,500 noenhanced
set output 'pareto.png'
set multiplot layout 1,2
set grid
set xlabel 'density (kept fraction beyond the window)'
set key top right
set title 'NLL increase vs full cache (chunked protocol)'
set ylabel 'delta NLL (%)'
plot 'nll_vs_density.dat' index 0 using 1:2 with linespoints lw 2 title 'Expected Attention', 'nll_vs_density.dat' index 1 using 1:2 with linespoints lw 2 title 'H2O', 'nll_vs_density.dat' index 2 using 1:2 with linespoints lw 2 title 'StreamingLLM', 'nll_vs_density.dat' index 3 using 1:2 with linespoints lw 2 title 'WG-KV (tau 0.05)', 'nll_vs_density.dat' index 4 using 1:2 with linespoints lw 2 title 'WG-KV (tau 0.1)', 'nll_vs_density.dat' index 5 using 1:2 with linespoints lw 2 title 'WG-KV (tau 0.3)'
set title 'WG-KV: held-out distillation loss (gates at tau)'
set ylabel 'MSE of final hidden states'
set logscale y
plot 'distill_vs_density.dat' using 1:2 with linespoints lw 2 title 'WG-KV (lambda sweep)'
unset multiplot
