#!/bin/busybox sh
# PID 1 of the test VM: load the kernel's own modules, mount the host's root read-only under a
# tmpfs overlay (so tests may write anywhere and the host sees none of it), run the plan that
# xtask wrote into the results share, power off. Every line on the console starting with
# "verdict-vm:" is read by xtask; anything else is only kept in the log.
/bin/busybox mkdir -p /bin /proc /sys /dev
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
echo "verdict-vm: kernel $(uname -r)"
failed_modules=""
while read -r m; do
  # A module already built in, or refused, is named once here; a test that needs it fails by itself.
  insmod "/modules/$m" 2>/dev/null || failed_modules="$failed_modules ${m%.ko}"
done < /modules/order
[ -n "$failed_modules" ] && echo "verdict-vm: modules not loaded:$failed_modules"
echo "verdict-vm: modules loaded"
mkdir -p /host /out /upper /newroot
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=512000,cache=loose hostroot /host \
  || { echo "verdict-vm: FATAL cannot mount the host root over 9p"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 out /out \
  || { echo "verdict-vm: FATAL cannot mount the results share over 9p"; poweroff -f; }
mount -t tmpfs -o size=75% upper /upper
mkdir -p /upper/u /upper/w
if ! mount -t overlay -o lowerdir=/host,upperdir=/upper/u,workdir=/upper/w overlay /newroot; then
  echo "verdict-vm: FATAL cannot mount the overlay root"; poweroff -f
fi
for d in proc sys dev; do mount --bind /$d /newroot/$d; done
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs shm /newroot/dev/shm
# A fresh /run (no host netns or lock files). /tmp stays the overlay's: writes there already
# go to the tmpfs upper layer, and a checkout under /tmp (as CI's may be) must stay visible.
for d in run var/run; do [ -L /newroot/$d ] || mount -t tmpfs -o mode=1777 tmp /newroot/$d; done
mkdir -p /newroot/run/netns /newroot/verdict-out
mount --bind /out /newroot/verdict-out
echo "verdict-vm: running plan"
chroot /newroot /bin/sh /verdict-out/plan.sh
echo "verdict-vm: plan exited $?"
sync
umount /newroot/verdict-out 2>/dev/null
poweroff -f
