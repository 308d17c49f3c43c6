/* LD_PRELOAD into a process under test: log how much of each CommitLog segment every fdatasync made
 * durable, so that tests/durable.py can drop the rest after a SIGKILL, as a power loss would.
 *
 * Before each fdatasync of a file under a "commitlog" directory it measures the file's written extent
 * (segments are preallocated with zeros: the extent ends at the last non-zero byte); once the sync
 * succeeds it appends "<extent> <path>\n" to the file named by $FERRYMQ_DURABLE_LOG with one write().
 * Bytes written while the sync runs count as lost: the log never claims more than the disk holds.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int (*real_fdatasync)(int);
static int log_fd = -1;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void) {
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    const char *path = getenv("FERRYMQ_DURABLE_LOG");
    if (path != NULL) log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
}

#define CHUNK (1 << 16)

/* The offset after the file's last non-zero byte; -1 if it cannot be read. (The buffer is not on the
 * stack: the broker's syncer thread has a small one.) */
static long written_extent(int fd) {
    struct stat st;
    long extent = 0;
    char *buf = malloc(CHUNK);
    if (buf == NULL || fstat(fd, &st) != 0) extent = -1;
    for (long end = extent < 0 ? 0 : st.st_size; end > 0;) {
        long start = end > CHUNK ? end - CHUNK : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - start), start);
        if (n != end - start) {
            extent = -1;
            break;
        }
        long i = n - 1;
        while (i >= 0 && buf[i] == 0) i--;
        if (i >= 0) {
            extent = start + i + 1;
            break;
        }
        end = start;
    }
    free(buf);
    return extent;
}

int fdatasync(int fd) {
    pthread_once(&once, init);
    char link[64], path[4096];
    long extent = -1;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = log_fd >= 0 ? readlink(link, path, sizeof path - 1) : -1;
    if (n > 0) {
        path[n] = 0;
        if (strstr(path, "/commitlog/") != NULL) extent = written_extent(fd);
    }
    int rc = real_fdatasync(fd);
    if (rc == 0 && extent >= 0) {
        char line[4200];
        int len = snprintf(line, sizeof line, "%ld %s\n", extent, path);
        if (write(log_fd, line, (size_t)len) != len) abort(); /* a log that lies would pass a bad broker */
    }
    return rc;
}
