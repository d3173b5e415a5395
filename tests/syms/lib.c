/* The shared library of tests/syms/target.c: it prints its own functions'
 * addresses, so the executable never takes them (a non-PIE executable that
 * did would get its PLT entry as the function's address instead). */
#include <stdio.h>

__attribute__((noinline)) int syms_lib_global(int x)
{
	return x ^ 0x5a;
}

__attribute__((noinline)) static int syms_lib_static(int x)
{
	return syms_lib_global(x) + 11;
}

void syms_lib_report(void)
{
	printf("syms_lib_global %p\n", (void *)syms_lib_global);
	printf("syms_lib_static %p\n", (void *)syms_lib_static);
	printf("lib_value %d\n", syms_lib_static(1));
}
