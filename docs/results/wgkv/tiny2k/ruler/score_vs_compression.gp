set terminal pngcairo size 900,600 noenhanced
set output 'score_vs_compression.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'score (0-100) vs compression ratio: kvsieve-tiny-2k.gguf'
set key outside right
set grid
set xrange [0:1.02]
plot 'score_vs_compression.dat' index 0 using 1:2 with linespoints title 'wgkv:model=models/wgkv/tiny2k-lambda0.08,window=128', 'score_vs_compression.dat' index 1 using 1:2 with linespoints title 'wgkv:model=models/wgkv/tiny2k-lambda0.32,window=128', 'score_vs_compression.dat' index 2 using 1:2 with linespoints title 'wgkv:model=models/wgkv/tiny2k-lambda1.28,window=128', 'score_vs_compression.dat' index 3 using 1:2 with linespoints title 'streaming_llm:window=128,sinks=4', 'score_vs_compression.dat' index 4 using 1:2 with linespoints title 'streaming_llm:window=256,sinks=4', 'score_vs_compression.dat' index 5 using 1:2 with linespoints title 'streaming_llm:window=512,sinks=4', 'score_vs_compression.dat' index 6 using 1:2 with linespoints title 'hybrid_heads:global=0.1,window=128,sinks=4', 'score_vs_compression.dat' index 7 using 1:2 with linespoints title 'hybrid_heads:global=0.0/0.1,window=128,sinks=4', 'score_vs_compression.dat' index 8 using 1:2 with linespoints title 'hybrid_heads:global=0.0/0.1/1.0/2.0,window=128,sinks=4', 'score_vs_compression.dat' index 9 using 1:2 with linespoints title 'quest', 'score_vs_compression.dat' index 10 using 1:2 with linespoints title 'wgkv:model=models/wgkv/tiny2k-lambda0.32,window=128+quest:budget=128'
