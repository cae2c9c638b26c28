/* The pod sandbox ("pause") process of the test cluster's pause image
 * (mk/tools.mk builds it with gcc -static into the tool cache): it sleeps
 * until SIGINT or SIGTERM and exits 0. */
#include <signal.h>
#include <unistd.h>
static void h(int s) { (void)s; _exit(0); }
int main(void) {
	signal(SIGINT, h);
	signal(SIGTERM, h);
	for (;;)
		pause();
}
