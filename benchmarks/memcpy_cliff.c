/* memcpy of N bytes, fastest of 50: where copies leave the last-level cache (docs/OPENMPI.md).
 *   gcc -O2 -o /tmp/memcpy_cliff benchmarks/memcpy_cliff.c && /tmp/memcpy_cliff 4194304 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(int c,char**v){size_t b=strtoull(v[1],0,10);char*s=malloc(b),*d=malloc(b);memset(s,1,b);memset(d,0,b);
double best=1e9;for(int i=0;i<50;i++){double t0=now();memcpy(d,s,b);double t=now()-t0;if(t<best)best=t;}
printf("bytes=%zu memcpy_min_us=%.1f GB/s=%.2f\n",b,best*1e6,b/best/1e9);}
