/* MPI_Allreduce as pccl-bench's `mpi` cell calls it, without pccl-bench: float32 sum, out of place,
 * a barrier before each call; prints the median and the fastest call of rank 0 (docs/OPENMPI.md).
 *   mpicc -O2 -o /tmp/allreduce_plain benchmarks/allreduce_plain.c
 *   mpiexec -n 2 /tmp/allreduce_plain 4194304 40        (Open MPI as root: --allow-run-as-root) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  MPI_Init(&argc,&argv);
  int rank; MPI_Comm_rank(MPI_COMM_WORLD,&rank);
  size_t bytes = argc>1 ? strtoull(argv[1],0,10) : 4u<<20;
  int iters = argc>2 ? atoi(argv[2]) : 40;
  size_t n = bytes/4;
  float *s = malloc(bytes), *r = malloc(bytes);
  for(size_t i=0;i<n;i++) s[i]=1.0f;
  memset(r,0,bytes);
  double *t = malloc(sizeof(double)*iters);
  for(int i=0;i<5;i++) MPI_Allreduce(s,r,n,MPI_FLOAT,MPI_SUM,MPI_COMM_WORLD);
  for(int i=0;i<iters;i++){
    MPI_Barrier(MPI_COMM_WORLD);
    double t0=MPI_Wtime();
    MPI_Allreduce(s,r,n,MPI_FLOAT,MPI_SUM,MPI_COMM_WORLD);
    t[i]=MPI_Wtime()-t0;
  }
  qsort(t,iters,sizeof(double),cmp);
  if(rank==0) printf("bytes=%zu median_us=%.1f min_us=%.1f\n",bytes,t[iters/2]*1e6,t[0]*1e6);
  MPI_Finalize(); return 0;
}
