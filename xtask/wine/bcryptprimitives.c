/* bcryptprimitives.dll's `ProcessPrng` for wine 8 (Debian 12), which lacks that DLL: Rust's
 * standard library on Windows (1.78 and later) draws its random bytes from it, so without it no
 * Rust program starts there. `cargo xtask platforms --test windows` builds this with MinGW and
 * puts it on wine's DLL path; it fills the buffer from RtlGenRandom (advapi32's
 * SystemFunction036), as Windows' own does from its kernel's generator. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T length) {
    while (length > 0) {
        ULONG chunk = length > 0x10000000 ? 0x10000000 : (ULONG)length;
        if (!SystemFunction036(data, chunk)) {
            return FALSE;
        }
        data += chunk;
        length -= chunk;
    }
    return TRUE;
}
