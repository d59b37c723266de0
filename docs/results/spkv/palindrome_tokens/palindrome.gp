set terminal pngcairo size 900,900 noenhanced
set output 'palindrome.png'
set multiplot layout 3,1 title 'Palindrome reversal (SP-KV App. G): 2 layers (unless named), D 128, 32 numbers, one token each'
set ylabel 'loss of the reversal (nats/token)'
set grid
set key top right
plot 'loss_full.dat' using 1:2 with lines lw 2 title 'full attention',      'loss_spkv.dat' using 1:2 with lines lw 2 title 'SP-KV, window 32',      'loss_window.dat' using 1:2 with lines lw 2 title 'sliding window 32', 'loss_full_wsd.dat' using 1:2 with lines lw 2 dt 2 title 'full attention, lr decayed from step 8000', 'loss_full_4l.dat' using 1:2 with lines lw 2 dt 4 lc rgb '#c00000' title 'full attention, 4 layers', 'loss_full_4l_long.dat' using 1:2 with lines lw 2 dt 1 lc rgb '#c00000' title 'full attention, 4 layers, continued', 'loss_full_4l_tail.dat' using 1:2 with lines lw 2 dt 1 lc rgb '#600000' title 'full attention, 4 layers, lr 2e-4 from step 15000'
set ylabel 'reversal accuracy (teacher-forced)'
set key bottom right
plot 'acc_full.dat' using 1:2 with linespoints lw 2 title 'full attention',      'acc_spkv.dat' using 1:2 with linespoints lw 2 title 'SP-KV, window 32',      'acc_window.dat' using 1:2 with linespoints lw 2 title 'sliding window 32', 'acc_full_wsd.dat' using 1:2 with linespoints lw 2 dt 2 title 'full attention, lr decayed from step 8000', 'acc_full_4l.dat' using 1:2 with linespoints lw 2 dt 4 lc rgb '#c00000' title 'full attention, 4 layers', 'acc_full_4l_long.dat' using 1:2 with linespoints lw 2 dt 1 lc rgb '#c00000' title 'full attention, 4 layers, continued', 'acc_full_4l_tail.dat' using 1:2 with linespoints lw 2 dt 1 lc rgb '#600000' title 'full attention, 4 layers, lr 2e-4 from step 15000'
set xlabel 'step'
set key top right
set ylabel 'SP-KV utility'
set yrange [0:1.05]
plot 'loss_spkv.dat' using 1:3 with lines lw 2 title 'mean u of keys beyond the window',      'loss_spkv.dat' using 1:4 with lines lw 2 title 'density (u >= 0.5)'
unset multiplot
