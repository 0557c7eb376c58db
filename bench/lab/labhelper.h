/* What labhelper.c and switch.c share. */
#ifndef PCCL_LABHELPER_H
#define PCCL_LABHELPER_H

/* `labhelper switch ARGS...`: the link emulator (switch.c); its exit status */
int run_switch(int argc, char **argv);

#endif
