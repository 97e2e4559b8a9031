/*
 * bcryptprimitives.dll for Wine 8.0 (Debian 12), which lacks ProcessPrng: the Go runtime of Go 1.22
 * and later loads bcryptprimitives.dll!ProcessPrng at start and aborts without it. hack/setup-wine.sh
 * builds this file with MinGW-w64's gcc (Debian package gcc-mingw-w64-x86-64-win32) and puts the DLL
 * in the test prefix's system32; it is never shipped, and Windows 10 and later have the real DLL.
 *
 * ProcessPrng fills len bytes with random bytes from advapi32's RtlGenRandom (SystemFunction036),
 * which Wine implements over the host's random source. RtlGenRandom takes a ULONG and returns a
 * BOOLEAN, ProcessPrng a SIZE_T and a BOOL: larger buffers are filled in chunks and the result is
 * widened, rather than exporting a forwarder with the other function's signature.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len)
{
	while (len > 0) {
		ULONG n = len > 0x40000000 ? 0x40000000 : (ULONG)len;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		len -= n;
	}
	return TRUE;
}

/* The DLL is linked without the C runtime (-nostdlib): this is its entry point. */
BOOL WINAPI DllMain(HINSTANCE instance, DWORD reason, LPVOID reserved)
{
	(void)instance;
	(void)reason;
	(void)reserved;
	return TRUE;
}
