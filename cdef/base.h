/* cdef/base.h - the kernel's fixed-width integer names used by libbpf's headers. */
typedef uint8_t __u8;
typedef int8_t __s8;
typedef uint16_t __u16;
typedef int16_t __s16;
typedef uint32_t __u32;
typedef int32_t __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef uint16_t __be16;
typedef uint32_t __be32;
typedef unsigned long long __aligned_u64;
typedef int... pid_t;
