set terminal pngcairo size 900,640 noenhanced
set output 'fidelity_accuracy.png'
set title 'Smollm2 135M 8k Lc100K Mix1 Ep2: token accuracy along the generation'
set xlabel 'generated tokens'
set ylabel 'greedy agreement with the full cache'
set key below
set grid
plot 'fidelity_accuracy.dat' index 0 with linespoints lc rgb '#332288' dt 1 pt 1 title 'full', 'fidelity_accuracy.dat' index 1 with linespoints lc rgb '#88CCEE' dt 1 pt 2 title 'kvpop:model=smollm2-135m-mlstm,budget=369', 'fidelity_accuracy.dat' index 2 with linespoints lc rgb '#44AA99' dt 1 pt 3 title 'kvpop_mlp:model=smollm2-135m-mlp,budget=369', 'fidelity_accuracy.dat' index 3 with linespoints lc rgb '#117733' dt 1 pt 4 title 'kvpop:model=smollm2-135m-mlstm-immediate,budget=369', 'fidelity_accuracy.dat' index 4 with linespoints lc rgb '#999933' dt 1 pt 5 title 'streaming_llm:window=365,sinks=4', 'fidelity_accuracy.dat' index 5 with linespoints lc rgb '#DDCC77' dt 1 pt 6 title 'tova:budget=369', 'fidelity_accuracy.dat' index 6 with linespoints lc rgb '#CC6677' dt 1 pt 7 title 'h2o:budget=369'
