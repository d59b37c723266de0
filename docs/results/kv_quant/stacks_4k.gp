set terminal pngcairo size 1100,650 noenhanced
set output 'stacks_4k.png'
set title 'Quantized KV pages x learned compression, RULER 4k, SmolLM2-135M-Instruct (* NLL above +1%)'
set xlabel 'x smaller than the full F16 cache (KV bytes per position)'
set ylabel 'RULER score, % of the full F16 cache'
set grid
set key outside right
set xrange [0:15.0]
set yrange [30:120]
set arrow from graph 0, first 95 to graph 1, first 95 nohead dt 2 lc rgb '#888888'
set arrow from 8, graph 0 to 8, graph 1 nohead dt 2 lc rgb '#888888'
plot 'stacks_4k.dat' index 0 using 1:2:4 with points pt variable ps 1.5 lc rgb '#332288' notitle, '' index 0 using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '#332288' notitle, NaN with points pt 7 ps 1.5 lc rgb '#332288' title 'full cache', \
  'stacks_4k.dat' index 1 using 1:2:4 with points pt variable ps 1.5 lc rgb '#88CCEE' notitle, '' index 1 using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '#88CCEE' notitle, NaN with points pt 7 ps 1.5 lc rgb '#88CCEE' title 'KVpop', \
  'stacks_4k.dat' index 2 using 1:2:4 with points pt variable ps 1.5 lc rgb '#117733' notitle, '' index 2 using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '#117733' notitle, NaN with points pt 7 ps 1.5 lc rgb '#117733' title 'KVzap-Linear', \
  'stacks_4k.dat' index 3 using 1:2:4 with points pt variable ps 1.5 lc rgb '#AA4499' notitle, '' index 3 using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '#AA4499' notitle, NaN with points pt 7 ps 1.5 lc rgb '#AA4499' title 'KVzap-MLP', \
  'stacks_4k.dat' index 4 using 1:2:4 with points pt variable ps 1.5 lc rgb '#999933' notitle, '' index 4 using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '#999933' notitle, NaN with points pt 7 ps 1.5 lc rgb '#999933' title 'SP-KV', \
  'stacks_4k.dat' index 5 using 1:2:4 with points pt variable ps 1.5 lc rgb '#CC6677' notitle, '' index 5 using 1:2:3 with labels offset 0.8,0.5 left font ',8' tc rgb '#CC6677' notitle, NaN with points pt 7 ps 1.5 lc rgb '#CC6677' title 'WG-KV', \
  NaN with points pt 7 ps 1.5 lc rgb 'black' title 'F16', \
  NaN with points pt 5 ps 1.5 lc rgb 'black' title 'Q8_0', \
  NaN with points pt 9 ps 1.5 lc rgb 'black' title 'Q8_0 keys, Q4_0 values', \
  NaN with points pt 13 ps 1.5 lc rgb 'black' title 'Q4_0 at admission', \
  NaN with points pt 8 ps 1.5 lc rgb 'black' title 'open: rotation off'
