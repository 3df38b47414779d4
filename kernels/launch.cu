/* launch: the per-thread switch for programmatic dependent launch (see launch.cuh). */
#include "kernels/kernels.h"
#include "kernels/launch.cuh"

/* per thread: two decoders on two threads each decide for their own launches */
static thread_local bool programmatic_launch = false;

bool kg_programmatic_launch_on(void)
{
    return programmatic_launch;
}

extern "C" int kg_programmatic_launch(int on)
{
    const int was = programmatic_launch ? 1 : 0;
    programmatic_launch = on != 0;
    return was;
}
