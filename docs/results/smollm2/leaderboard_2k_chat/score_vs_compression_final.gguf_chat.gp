set terminal pngcairo size 900,760 noenhanced
set output 'score_vs_compression_final.gguf_chat.png'
set xlabel 'compression ratio'
set ylabel 'score (0-100)'
set title 'final.gguf: ruler, query-agnostic, chat prompts'
set key below left Left reverse
set grid
set xrange [0:1.02]
set yrange [0:*]
plot 'score_vs_compression_final.gguf_chat.dat' index 0 using 1:2:3 with yerrorlines lc rgb '#332288' dt 1 pt 1 title 'spkv (rule=threshold)'
