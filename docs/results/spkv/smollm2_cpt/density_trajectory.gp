set terminal pngcairo size 900,450 noenhanced
set output 'density_trajectory.png'
set title 'SP-KV continued pretraining of SmolLM2-135M-Instruct: gates during training'
set xlabel 'step (2048 tokens each)'
set ylabel 'fraction'
set yrange [0:1.05]
set grid
set key center right
plot 'density_steps.dat' using 1:2 with linespoints lw 2 title 'batch density (u >= tau)', \
     'density_steps.dat' using 1:3 with linespoints lw 2 title 'mean utility', \
     'density_steps.dat' using 1:4 with lines lw 2 dt 2 title 'TAHG alpha'
