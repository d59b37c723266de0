set terminal pngcairo size 900,640 noenhanced
set output 'fidelity_memory.png'
set title 'Smollm2 135M 8k Lc100K Mix1 Ep2: KV memory during generation'
set xlabel 'tokens in the sequence'
set ylabel 'KV cache (MiB)'
set key below
set grid
plot 'fidelity_memory.dat' index 0 with linespoints title 'kvpop:model=smollm2-135m-mlstm,budget=606'
