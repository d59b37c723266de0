set terminal pngcairo size 900,500 noenhanced
set output 'density_trajectory.png'
set title 'SP-KV on kvsieve-tiny-2k: density during training'
set xlabel 'step'
set ylabel 'density'
set yrange [0:1.05]
set grid
set key outside right
plot 'density_steps.dat' using 1:2 with lines lw 2 lc rgb 'black' title 'batch (u >= tau)', 'density_steps.dat' using 1:4 with lines dt 2 lc rgb 'gray' title 'TAHG alpha', 'density_heads.dat' using 1:2 with linespoints title 'layer 0 head 0', 'density_heads.dat' using 1:3 with linespoints title 'layer 0 head 1', 'density_heads.dat' using 1:4 with linespoints title 'layer 1 head 0', 'density_heads.dat' using 1:5 with linespoints title 'layer 1 head 1', 'density_heads.dat' using 1:6 with linespoints title 'layer 2 head 0', 'density_heads.dat' using 1:7 with linespoints title 'layer 2 head 1', 'density_heads.dat' using 1:8 with linespoints title 'layer 3 head 0', 'density_heads.dat' using 1:9 with linespoints title 'layer 3 head 1'
