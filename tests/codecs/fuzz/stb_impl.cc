// stb_image and stb_image_write compiled into the image fuzz target itself, so that the
// fuzzer's coverage and sanitizers reach the decoder (Debian's libstb is not instrumented).
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb/stb_image.h>
#include <stb/stb_image_write.h>
