/* The process tests/test_syms.py resolves: it prints the runtime address of
 * functions of its own, of a shared library's and of the vDSO's, one
 * "name address" line each, then waits until its stdin closes. Built by the
 * test as PIE, non-PIE and stripped (see test_syms.py). */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>

void syms_lib_report(void);

__attribute__((noinline)) int syms_exe_global(int x)
{
	return x * 3 + 1;
}

__attribute__((noinline)) static int syms_exe_static(int x)
{
	return syms_exe_global(x) - 7;
}

int main(void)
{
	char buf[1];
	void *vdso = dlopen("linux-vdso.so.1", RTLD_NOLOAD | RTLD_LAZY);

	printf("syms_exe_global %p\n", (void *)syms_exe_global);
	printf("syms_exe_static %p\n", (void *)syms_exe_static);
	syms_lib_report();
	if (vdso)
		printf("__vdso_clock_gettime %p\n", dlsym(vdso, "__vdso_clock_gettime"));
	printf("ready %d\n", syms_exe_static(2));
	fflush(stdout);
	while (read(0, buf, 1) > 0)
		;
	return 0;
}
