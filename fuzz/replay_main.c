/* replay_main: runs a libFuzzer harness over every file of a corpus folder,
 * once each, without libFuzzer. `make test` uses it to replay the seed
 * corpora under the sanitizers with the project's own compiler. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define REPLAY_MAX_INPUT (4u * 1024 * 1024)

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX_INPUT);
    if (buf == NULL) {
        fclose(f);
        return -1;
    }
    size_t n = fread(buf, 1, REPLAY_MAX_INPUT, f);
    fclose(f);
    /* Copy to an exact-size allocation so ASan sees reads past the end. */
    uint8_t *exact = malloc(n ? n : 1);
    if (exact == NULL) {
        free(buf);
        return -1;
    }
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[i]) != 0)
                return 1;
            files++;
            continue;
        }
        DIR *dir = opendir(argv[i]);
        if (dir == NULL) {
            perror(argv[i]);
            return 1;
        }
        struct dirent *de;
        while ((de = readdir(dir)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], de->d_name);
            if (replay_file(path) != 0) {
                closedir(dir);
                return 1;
            }
            files++;
        }
        closedir(dir);
    }
    if (files == 0) {
        fprintf(stderr, "replay: no corpus files found\n");
        return 1;
    }
    printf("replayed %d inputs\n", files);
    return 0;
}
