set terminal pngcairo size 900,420 noenhanced
set output 'by_index.png'
set title 'Palindrome reversal: accuracy per answer index, 256 held-out rows (index 32 is EOS)'
set xlabel 'answer index k (the list number 31 - k)'
set ylabel 'accuracy (teacher-forced)'
set yrange [0:1.05]
set grid
set key outside right
plot 'by_index.dat' index 0 using 1:2 with linespoints lw 2 title 'full', \
     'by_index.dat' index 1 using 1:2 with linespoints lw 2 title 'spkv', \
     'by_index.dat' index 2 using 1:2 with linespoints lw 2 title 'window', \
     'by_index.dat' index 3 using 1:2 with linespoints lw 2 title 'full-4l', \
     'by_index.dat' index 4 using 1:2 with linespoints lw 2 title 'full-4l-long', \
     'by_index.dat' index 5 using 1:2 with linespoints lw 2 title 'full-4l-tail'
