set terminal pngcairo size 900,640 noenhanced
set output 'fidelity_accuracy.png'
set title 'Smollm2 135M 8k Lc100K Mix1 Ep2: token accuracy along the generation'
set xlabel 'generated tokens'
set ylabel 'greedy agreement with the full cache'
set key below
set grid
plot 'fidelity_accuracy.dat' index 0 with linespoints title 'kvpop:model=smollm2-135m-mlstm,budget=606'
