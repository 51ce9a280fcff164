// The report file of a stand-in library (`libcuda.c`, `libcublas.c`): `$<variable>.<pid>`, opened
// for writing; NULL when the variable is unset or the file does not open.
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static FILE *open_report(const char *variable) {
    const char *path = getenv(variable);
    if (!path) return NULL;
    char file[4096];
    snprintf(file, sizeof file, "%s.%d", path, (int)getpid());
    return fopen(file, "w");
}
